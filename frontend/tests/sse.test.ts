import { describe, expect, it } from 'vitest'

import { readSse, SseParser, StreamInterrupted, type SseEvent } from '../src/lib/sse'
import { sseResponse } from './fakeFetch'

/** Every event of `text` fed in pieces cut at `cuts` (offsets into `text`). */
function parseCut(text: string, cuts: number[]): { events: SseEvent[]; retry: number | null } {
  const parser = new SseParser()
  const events: SseEvent[] = []
  let at = 0
  for (const cut of [...cuts, text.length]) {
    events.push(...parser.feed(text.slice(at, cut)))
    at = cut
  }
  return { events, retry: parser.retry }
}

const STREAM =
  ': a comment, then a retry\r\n' +
  'retry: 1500\r\n' +
  'event: text_delta\r\n' +
  'id: 7\r\n' +
  'data: first line\r\n' +
  'data:second line\r\n' +
  'data:  two spaces keep one\r\n' +
  '\r\n' +
  'data: no event name, id kept\n' +
  '\n' +
  'event: started\r' +
  'id: 8\r' +
  'data: {"a": 1}\r' +
  '\r' +
  'id: 9\n' +
  'event: lonely\n' +
  '\n' + // no data: dispatches nothing, but the id stays
  'data\n' + // a field without a colon: empty data
  '\n' +
  'unknown: ignored\n' +
  'data: 中文 ✓\n' +
  '\n' +
  'data: never finished'

const EXPECTED: SseEvent[] = [
  { event: 'text_delta', id: '7', data: 'first line\nsecond line\n two spaces keep one' },
  { event: 'message', id: '7', data: 'no event name, id kept' },
  { event: 'started', id: '8', data: '{"a": 1}' },
  { event: 'message', id: '9', data: '' },
  { event: 'message', id: '9', data: '中文 ✓' },
]

describe('SseParser', () => {
  it('parses a whole stream: fields, comments, retry, CRLF/LF/CR line ends', () => {
    expect(parseCut(STREAM, [])).toEqual({ events: EXPECTED, retry: 1500 })
  })

  it('gives the same events wherever the chunks are cut', () => {
    for (let cut = 0; cut <= STREAM.length; cut++) {
      expect(parseCut(STREAM, [cut]).events, `cut at ${cut}`).toEqual(EXPECTED)
    }
  })

  it('gives the same events one character at a time', () => {
    const cuts = Array.from({ length: STREAM.length }, (_, i) => i)
    expect(parseCut(STREAM, cuts)).toEqual({ events: EXPECTED, retry: 1500 })
  })

  it('reads a CRLF split between two chunks as one line end', () => {
    const parser = new SseParser()
    expect(parser.feed('data: a\r')).toEqual([])
    expect(parser.feed('\ndata: b\r')).toEqual([])
    // Had the LF counted as a second line end, `a` would have been dispatched alone.
    expect(parser.feed('\n\r')).toEqual([{ event: 'message', id: '', data: 'a\nb' }])
    expect(parser.feed('\n')).toEqual([]) // the LF of that CRLF: no further event
  })

  it('keeps a field name cut in two', () => {
    const parser = new SseParser()
    expect(parser.feed('ev')).toEqual([])
    expect(parser.feed('ent: progress\nda')).toEqual([])
    expect(parser.feed('ta: {"x":1}\ni')).toEqual([])
    expect(parser.feed('d: 42\n\n')).toEqual([{ event: 'progress', id: '42', data: '{"x":1}' }])
  })

  it('ignores an id holding NUL and a retry that is not a number', () => {
    const { events, retry } = parseCut('id: 3\nretry: soon\n\nid: 4\u00005\ndata: x\n\n', [])
    expect(events).toEqual([{ event: 'message', id: '3', data: 'x' }])
    expect(retry).toBeNull()
  })

  it('drops a byte-order mark at the start only', () => {
    expect(parseCut('\ufeffdata: x\n\n', [1]).events).toEqual([{ event: 'message', id: '', data: 'x' }])
    expect(parseCut('\ufeffdata: x\n\n', []).events).toEqual([{ event: 'message', id: '', data: 'x' }])
  })
})

describe('readSse', () => {
  it('decodes UTF-8 split across reads', async () => {
    const bytes = new TextEncoder().encode('data: 引用 ✓\n\n')
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const byte of bytes) controller.enqueue(new Uint8Array([byte])) // every character cut
        controller.close()
      },
    })
    const events: SseEvent[] = []
    for await (const event of readSse(body)) events.push(event)
    expect(events).toEqual([{ event: 'message', id: '', data: '引用 ✓' }])
  })

  it('yields what arrived, then fails with StreamInterrupted when the connection drops', async () => {
    const response = sseResponse(['data: 1\n\ndata: 2\n', '\ndata: half'], { drop: true })
    const events: string[] = []
    const reading = (async () => {
      for await (const event of readSse(response.body!)) events.push(event.data)
    })()
    await expect(reading).rejects.toBeInstanceOf(StreamInterrupted)
    expect(events).toEqual(['1', '2'])
  })
})
