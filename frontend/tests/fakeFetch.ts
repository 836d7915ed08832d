/** A scripted `fetch` for the client's tests: each call takes the next answer and is recorded. */

export interface RecordedRequest {
  method: string
  url: string
  headers: Headers
  body: unknown
}

export type Answer = (request: RecordedRequest) => Response | Promise<Response>

export interface FakeFetch {
  fetch: typeof fetch
  requests: RecordedRequest[]
}

/** A fetch answering the calls in order with `answers`; a call beyond them fails the test. */
export function fakeFetch(...answers: Answer[]): FakeFetch {
  const requests: RecordedRequest[] = []
  const queue = [...answers]
  const fetcher = async (input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> => {
    const request: RecordedRequest = {
      method: init.method ?? 'GET',
      url: String(input),
      headers: new Headers(init.headers),
      body: init.body,
    }
    requests.push(request)
    const answer = queue.shift()
    if (!answer) throw new Error(`unexpected request ${request.method} ${request.url}`)
    return answer(request)
  }
  return { fetch: fetcher as typeof fetch, requests }
}

const encoder = new TextEncoder()

/**
 * An event-stream response sending `chunks` one read at a time, then ending — or, with `drop`,
 * failing the next read the way a cut connection does.
 */
export function sseResponse(chunks: string[], options: { drop?: boolean } = {}): Response {
  const queue = [...chunks]
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = queue.shift()
      if (chunk !== undefined) controller.enqueue(encoder.encode(chunk))
      else if (options.drop) controller.error(new TypeError('terminated'))
      else controller.close()
    },
  })
  return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream; charset=utf-8' } })
}

export function jsonResponse(status: number, body: unknown): Response {
  return new Response(status === 204 ? null : JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json' },
  })
}

/** One turn event framed as the gateway frames it (FastAPI's `format_sse_event`): `event:` kind,
 * `data:` the JSON, `id:` sequence, LF line ends. */
export function turnEvent(turnId: string, sequence: number, kind: string, fields: Record<string, unknown> = {}): string {
  const data = JSON.stringify({ turn_id: turnId, sequence, kind, citations: [], ...fields })
  return `event: ${kind}\ndata: ${data}\nid: ${sequence}\n\n`
}

/** A Storage kept in memory. */
export function memoryStorage(): Storage {
  const items = new Map<string, string>()
  return {
    get length() {
      return items.size
    },
    clear: () => items.clear(),
    getItem: (key) => items.get(key) ?? null,
    key: (index) => [...items.keys()][index] ?? null,
    removeItem: (key) => void items.delete(key),
    setItem: (key, value) => void items.set(key, String(value)),
  }
}
