/**
 * An incremental parser of Server-Sent Events (the WHATWG `text/event-stream` format), for streams
 * read with `fetch`: `EventSource` cannot send an `Authorization` header.
 *
 * Feed it text in chunks of any size — a chunk may end inside a field name, between the CR and the LF
 * of a line end, or in the middle of a multi-line `data:` — and it returns the events completed so far.
 * Lines end with CRLF, LF or CR; `event:` names the event (default `message`), `data:` lines are joined
 * with `\n`, `id:` sets the last event id (kept for the following events, as the format says), `retry:`
 * the reconnection delay, and a line starting with `:` is a comment.
 */

export interface SseEvent {
  /** The `event:` field; `message` when the event named none. */
  event: string
  /** The last event id of the stream when this event was dispatched (`''` before any `id:`). */
  id: string
  data: string
}

const LF = 10
const CR = 13

export class SseParser {
  /** The last `retry:` value (milliseconds), or null when the stream has sent none. */
  retry: number | null = null

  private pending = ''
  private afterCR = false
  private started = false
  private eventType = ''
  private data: string[] = []
  private lastEventId = ''

  /** The events that `chunk` completes, in order. */
  feed(chunk: string): SseEvent[] {
    const events: SseEvent[] = []
    let text = chunk
    if (!this.started && text.length > 0) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1) // a byte-order mark starts no field
    }
    let start = 0
    for (let i = 0; i < text.length; i++) {
      const code = text.charCodeAt(i)
      if (code !== LF && code !== CR) continue
      if (code === LF && this.afterCR && i === start && this.pending === '') {
        // The LF of a CRLF whose CR ended the previous line (possibly in the previous chunk).
        this.afterCR = false
        start = i + 1
        continue
      }
      const line = this.pending + text.slice(start, i)
      this.pending = ''
      this.afterCR = code === CR
      start = i + 1
      const event = this.line(line)
      if (event) events.push(event)
    }
    if (start < text.length) {
      this.pending += text.slice(start)
      this.afterCR = false
    }
    return events
  }

  private line(line: string): SseEvent | null {
    if (line === '') return this.dispatch()
    if (line.charCodeAt(0) === 58 /* ':' */) return null // a comment (keep-alive)
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    switch (field) {
      case 'event':
        this.eventType = value
        break
      case 'data':
        this.data.push(value)
        break
      case 'id':
        if (!value.includes('\0')) this.lastEventId = value
        break
      case 'retry':
        if (/^[0-9]+$/.test(value)) this.retry = Number(value)
        break
      default:
        break // unknown fields are ignored
    }
    return null
  }

  private dispatch(): SseEvent | null {
    const type = this.eventType
    const data = this.data
    this.eventType = ''
    this.data = []
    if (data.length === 0) return null // an event without data is not dispatched
    return { event: type || 'message', id: this.lastEventId, data: data.join('\n') }
  }
}

/** The connection under an event stream failed while it was being read. */
export class StreamInterrupted extends Error {
  constructor(readonly reason: unknown) {
    super(`the event stream was interrupted: ${reason instanceof Error ? reason.message : String(reason)}`)
    this.name = 'StreamInterrupted'
  }
}

/**
 * The events of an event-stream body as they arrive. Bytes are decoded as UTF-8 across chunk
 * boundaries; an event left unfinished when the body ends is dropped, as the format says. A read that
 * fails (the connection dropped) rejects the iteration with {@link StreamInterrupted}.
 */
export async function* readSse(
  body: ReadableStream<Uint8Array>,
  parser: SseParser = new SseParser(),
): AsyncGenerator<SseEvent> {
  const reader = body.getReader()
  const decoder = new TextDecoder('utf-8')
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>
      try {
        chunk = await reader.read()
      } catch (error) {
        throw new StreamInterrupted(error)
      }
      const { done, value } = chunk
      if (done) break
      yield* parser.feed(decoder.decode(value, { stream: true }))
    }
    yield* parser.feed(decoder.decode())
  } finally {
    // Stops the download when the reader stops early (a final event, a cancelled view).
    reader.cancel().catch(() => {})
    reader.releaseLock()
  }
}
