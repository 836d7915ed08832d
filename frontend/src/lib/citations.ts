/**
 * An answer's text as text segments and citation markers mapped to the turn's sources.
 *
 * The backend writes a citation as `[[cN]]` right after the fact it supports, N numbering the turn's
 * sources (1 to 4 digits: `CITATION` in services/conversation/…/domain/citations.py and
 * `CITATION_MARKER` in libs/contracts/…/events.py). It never writes a list such as `[[c1,c3]]`, so
 * this grammar has none either: such text, like a marker naming no source of the turn, stays plain text.
 */

/** Where a citation points: a passage of a document of a knowledge base, or a web page. */
export interface Source {
  /** `cN` as written in the answer. */
  handle: string
  /** N, which the UI shows as `[N]`. */
  number: number
  fileName: string
  title: string
  url: string
  knowledgeBaseId: string
  documentId: string
  chunkId: string
  /** 1-based; 0 when the format has no pages (or the source did not say). */
  page: number
  headingPath: string[]
  snippet: string
}

/**
 * A source as the API sends it: `handle` in turn events (`ChatTurnEvent.citations`), `label` and
 * `index` in a session's stored messages (`Message.citations`).
 */
export interface SourceJson {
  handle?: string | null
  label?: string | null
  index?: number | null
  file_name?: string | null
  title?: string | null
  url?: string | null
  knowledge_base_id?: string | null
  document_id?: string | null
  chunk_id?: string | null
  page?: number | null
  heading_path?: string[] | null
  snippet?: string | null
}

export type Segment =
  | { kind: 'text'; text: string }
  | { kind: 'citation'; marker: string; source: Source }

/** One marker: the whole `[[cN]]`, its handle in group 1 (the backend's grammar). */
const MARKER = /\[\[(c\d{1,4})\]\]/g

/** A source from the API's JSON, or null when it has no handle. */
export function sourceFromJson(json: SourceJson): Source | null {
  const handle = json.handle || json.label || ''
  const match = /^c(\d{1,4})$/.exec(handle)
  if (!match) return null
  return {
    handle,
    number: json.index || Number(match[1]),
    fileName: json.file_name ?? '',
    title: json.title ?? '',
    url: json.url ?? '',
    knowledgeBaseId: json.knowledge_base_id ?? '',
    documentId: json.document_id ?? '',
    chunkId: json.chunk_id ?? '',
    page: json.page ?? 0,
    headingPath: json.heading_path ?? [],
    snippet: json.snippet ?? '',
  }
}

/**
 * `sources` merged by handle, a later one replacing an earlier one field by field where it says more
 * (a turn's final `completed` event lists the cited sources again).
 */
export function mergeSources(known: ReadonlyMap<string, Source>, more: Iterable<Source>): Map<string, Source> {
  const merged = new Map(known)
  for (const source of more) {
    const before = merged.get(source.handle)
    merged.set(source.handle, before ? mergeOne(before, source) : source)
  }
  return merged
}

function mergeOne(before: Source, after: Source): Source {
  return {
    handle: after.handle,
    number: after.number || before.number,
    fileName: after.fileName || before.fileName,
    title: after.title || before.title,
    url: after.url || before.url,
    knowledgeBaseId: after.knowledgeBaseId || before.knowledgeBaseId,
    documentId: after.documentId || before.documentId,
    chunkId: after.chunkId || before.chunkId,
    page: after.page || before.page,
    headingPath: after.headingPath.length ? after.headingPath : before.headingPath,
    snippet: after.snippet || before.snippet,
  }
}

/**
 * `text` cut into text and citations. A marker whose handle is not among `sources` is plain text;
 * adjacent text is kept in one segment.
 */
export function splitCitations(text: string, sources: ReadonlyMap<string, Source>): Segment[] {
  const segments: Segment[] = []
  const pushText = (piece: string) => {
    if (!piece) return
    const last = segments[segments.length - 1]
    if (last && last.kind === 'text') last.text += piece
    else segments.push({ kind: 'text', text: piece })
  }
  let at = 0
  for (const match of text.matchAll(MARKER)) {
    const index = match.index ?? 0
    pushText(text.slice(at, index))
    const source = sources.get(match[1])
    if (source) segments.push({ kind: 'citation', marker: match[0], source })
    else pushText(match[0])
    at = index + match[0].length
  }
  pushText(text.slice(at))
  return segments
}

/** What a citation shows as its name: the document's file name, else its title, else its URL. */
export function sourceName(source: Source): string {
  return source.fileName || source.title || source.url || source.handle
}
