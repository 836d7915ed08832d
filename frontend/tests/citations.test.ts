import { describe, expect, it } from 'vitest'

import { mergeSources, sourceFromJson, sourceName, splitCitations, type Source } from '../src/lib/citations'

function sources(...json: Parameters<typeof sourceFromJson>[0][]): Map<string, Source> {
  return new Map(json.map(sourceFromJson).filter((s): s is Source => s !== null).map((s) => [s.handle, s]))
}

const TURN = sources(
  {
    handle: 'c1',
    file_name: 'handbook.pdf',
    knowledge_base_id: 'kb1',
    document_id: 'd1',
    chunk_id: 'k1',
    page: 12,
    heading_path: ['Testing', 'Running the tests'],
    snippet: 'Run make test.',
  },
  { handle: 'c3', title: 'Release notes', url: 'https://example.com/notes' },
)

describe('splitCitations', () => {
  it('cuts the text into text and citations mapped to their sources', () => {
    const segments = splitCitations('Run make test[[c1]]. It is fast[[c1]][[c3]].', TURN)
    expect(segments.map((s) => (s.kind === 'text' ? s.text : `#${s.source.number}`))).toEqual([
      'Run make test',
      '#1',
      '. It is fast',
      '#1',
      '#3',
      '.',
    ])
    const first = segments[1]
    expect(first.kind === 'citation' && first.source).toMatchObject({
      fileName: 'handbook.pdf',
      page: 12,
      headingPath: ['Testing', 'Running the tests'],
      knowledgeBaseId: 'kb1',
      documentId: 'd1',
      chunkId: 'k1',
      snippet: 'Run make test.',
    })
  })

  it('leaves a marker naming no source of the turn as plain text', () => {
    expect(splitCitations('A[[c2]] B[[c1]]', TURN)).toEqual([
      { kind: 'text', text: 'A[[c2]] B' },
      { kind: 'citation', marker: '[[c1]]', source: TURN.get('c1') },
    ])
  })

  it('leaves what the backend never writes as plain text: lists, spaces, five digits, half markers', () => {
    for (const text of ['[[c1,c3]]', '[[c1, c3]]', '[[ c1 ]]', '[[c12345]]', '[[c1]', '[c1]]', '[[C1]]', '[[c]]']) {
      expect(splitCitations(text, TURN), text).toEqual([{ kind: 'text', text }])
    }
  })

  it('gives no segment for empty text, and plain text when there are no sources', () => {
    expect(splitCitations('', TURN)).toEqual([])
    expect(splitCitations('x[[c1]]', new Map())).toEqual([{ kind: 'text', text: 'x[[c1]]' }])
  })
})

describe('sources', () => {
  it('reads a stored message citation (label and index) as well as a turn event one (handle)', () => {
    expect(sourceFromJson({ label: 'c4', index: 4, file_name: 'a.md' })).toMatchObject({ handle: 'c4', number: 4 })
    expect(sourceFromJson({ handle: 'c10' })).toMatchObject({ handle: 'c10', number: 10, page: 0, headingPath: [] })
    expect(sourceFromJson({ file_name: 'no handle' })).toBeNull()
  })

  it('merges a later listing of a source without losing what the earlier one said', () => {
    const early = sources({ handle: 'c1', file_name: 'a.pdf', page: 3, heading_path: ['A'], snippet: 'text' })
    const late = sources({ handle: 'c1', file_name: 'a.pdf', document_id: 'd1' })
    expect(mergeSources(early, late.values()).get('c1')).toMatchObject({
      fileName: 'a.pdf',
      page: 3,
      headingPath: ['A'],
      snippet: 'text',
      documentId: 'd1',
    })
  })

  it('names a source by file name, else title, else URL', () => {
    expect(sourceName(TURN.get('c1')!)).toBe('handbook.pdf')
    expect(sourceName(TURN.get('c3')!)).toBe('Release notes')
    expect(sourceName(sourceFromJson({ handle: 'c5', url: 'https://x.example' })!)).toBe('https://x.example')
  })
})
