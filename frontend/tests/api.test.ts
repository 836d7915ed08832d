import { describe, expect, it } from 'vitest'

import { ApiClient, ApiError, NETWORK_ERROR, batches, sessionCredentials, type DocumentProgress } from '../src/lib/api'
import { fakeFetch, jsonResponse, memoryStorage, sseResponse, type Answer } from './fakeFetch'

function client(...answers: Answer[]) {
  const fake = fakeFetch(...answers)
  const storage = memoryStorage()
  const api = new ApiClient({ fetch: fake.fetch, credentials: sessionCredentials(storage), language: () => 'zh' })
  return { api, requests: fake.requests, storage }
}

describe('signing in', () => {
  it('offers going on without a token when the gateway answers an unauthenticated read (local mode)', async () => {
    const { api, requests } = client(() => jsonResponse(200, { knowledge_bases: [], next_page_token: '' }))
    expect(await api.tokenless()).toBe(true)
    expect(requests[0].url).toBe('/api/v1/knowledge-bases?page_size=1')
    expect(requests[0].headers.has('authorization')).toBe(false)
  })

  it('asks for a token when the gateway answers 401', async () => {
    const { api } = client(() => jsonResponse(401, { error: { code: 'unauthenticated', message: 'an API token is required' } }))
    expect(await api.tokenless()).toBe(false)
  })

  it('keeps an accepted token in sessionStorage only, and refuses a revoked one with the server\'s message', async () => {
    const { api, requests, storage } = client(
      () => jsonResponse(401, { error: { code: 'unauthenticated', message: 'the token t1 has been revoked' } }),
      () => jsonResponse(200, { knowledge_bases: [], next_page_token: '' }),
    )
    await expect(api.signIn({ kind: 'token', token: 'ks_old' })).rejects.toThrow('the token t1 has been revoked')
    expect(api.signedIn).toBe(false)
    await api.signIn({ kind: 'token', token: 'ks_new' })
    expect(requests[1].headers.get('authorization')).toBe('Bearer ks_new')
    expect(JSON.parse(storage.getItem('knowsphere.credentials')!)).toEqual({ kind: 'token', token: 'ks_new' })
    expect(api.signedIn).toBe(true)
  })
})

describe('calls', () => {
  it('sends the token and the UI language, and raises the server\'s error with its code and field', async () => {
    let unauthorized: ApiError | null = null
    const { api, requests } = client(
      () =>
        jsonResponse(400, {
          error: { code: 'invalid_argument', message: 'name: at most 200 characters', field: 'name', correlation_id: 'abc' },
        }),
      () => jsonResponse(401, { error: { code: 'unauthenticated', message: 'the token has expired' } }),
    )
    api.credentials.save({ kind: 'token', token: 'ks_1' })
    api.onUnauthorized((error) => (unauthorized = error))
    const error = await api.createKnowledgeBase({ name: 'x'.repeat(300) }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ApiError)
    expect(error).toMatchObject({ status: 400, code: 'invalid_argument', field: 'name', correlationId: 'abc' })
    expect((error as ApiError).message).toBe('name: at most 200 characters')
    expect(requests[0].headers.get('authorization')).toBe('Bearer ks_1')
    expect(requests[0].headers.get('accept-language')).toBe('zh')
    expect(requests[0].headers.get('content-type')).toBe('application/json')

    await expect(api.listSessions()).rejects.toThrow('the token has expired')
    expect(unauthorized).toMatchObject({ status: 401 })
  })

  it('sends no Authorization header in local mode', async () => {
    const { api, requests } = client(() => jsonResponse(200, { sessions: [], next_page_token: '' }))
    api.credentials.save({ kind: 'local' })
    await api.listSessions()
    expect(requests[0].headers.has('authorization')).toBe(false)
  })

  it('reads every page of a list', async () => {
    const { api, requests } = client(
      () => jsonResponse(200, { knowledge_bases: [{ id: 'a' }], next_page_token: 'p2' }),
      () => jsonResponse(200, { knowledge_bases: [{ id: 'b' }], next_page_token: '' }),
    )
    expect((await api.listKnowledgeBases()).map((kb) => kb.id)).toEqual(['a', 'b'])
    expect(requests[1].url).toBe('/api/v1/knowledge-bases?page_token=p2')
  })

  it('turns an unreachable gateway and a non-JSON error page into errors a user can read', async () => {
    const { api } = client(
      () => Promise.reject(new TypeError('Failed to fetch')),
      () => new Response('<html>Bad Gateway</html>', { status: 502, statusText: 'Bad Gateway' }),
    )
    await expect(api.listSessions()).rejects.toMatchObject({ status: 0, code: NETWORK_ERROR })
    await expect(api.listSessions()).rejects.toMatchObject({ status: 502, message: 'HTTP 502 Bad Gateway' })
  })
})

describe('uploads', () => {
  const file = (name: string, size: number) => new File([new Uint8Array(size)], name)

  it('cuts files into requests by count and size, keeping the order', () => {
    const files = [file('a', 5), file('b', 5), file('c', 5), file('d', 20), file('e', 1)]
    expect(batches(files, 2, 12).map((run) => run.map((f) => f.name).join(''))).toEqual(['ab', 'c', 'd', 'e'])
  })

  it('sends each file as a `file` part, splits a request refused as too large, and keeps one result per file', async () => {
    const ok = (name: string) => ({ file_name: name, document: { id: `doc-${name}` }, duplicate: false, error: null })
    const tooLarge = () => jsonResponse(413, { error: { code: 'payload_too_large', message: 'over 1 GiB' } })
    const { api, requests } = client(
      tooLarge, // a, b, c together
      () => jsonResponse(200, { results: [ok('a.md'), ok('b.md')] }),
      tooLarge, // c alone
    )
    const results = await api.uploadDocuments('kb1', [file('a.md', 3), file('b.md', 3), file('c.md', 3)], 10)
    expect(results.map((r) => r.file_name)).toEqual(['a.md', 'b.md', 'c.md'])
    expect(results[2].error).toMatchObject({ code: 'payload_too_large', message: 'over 1 GiB' })
    expect(requests[0].url).toBe('/api/v1/knowledge-bases/kb1/documents/batch')
    const form = requests[0].body as FormData
    expect(form.getAll('file').map((f) => (f as File).name)).toEqual(['a.md', 'b.md', 'c.md'])
    expect(requests[0].headers.has('content-type')).toBe(false) // fetch sets the multipart boundary
  })
})

describe('progress', () => {
  const progress = (id: string, percent: number) => `event: progress\ndata: ${JSON.stringify({ document_id: id, percent })}\n\n`

  it('opens the watch again after a drop and stops on a refusal', async () => {
    const controller = new AbortController()
    const { api, requests } = client(
      () => sseResponse([progress('d1', 10), progress('d1', 50)], { drop: true }),
      () => sseResponse([progress('d1', 100)]), // the server ended the stream: opened again
      () => jsonResponse(404, { error: { code: 'not_found', message: 'knowledge base kb1 not found' } }),
    )
    const seen: number[] = []
    const pauses: number[] = []
    const watching = api.watchProgress('kb1', (p: DocumentProgress) => seen.push(p.percent), controller.signal, async (ms) => {
      pauses.push(ms)
    })
    await expect(watching).rejects.toThrow('knowledge base kb1 not found')
    expect(seen).toEqual([10, 50, 100])
    expect(requests.map((r) => r.url)).toEqual(Array(3).fill('/api/v1/knowledge-bases/kb1/progress'))
    expect(pauses).toEqual([500, 500]) // progress arrived each time: no growing pause
  })

  it('ends with the error event the server sends', async () => {
    const { api } = client(() =>
      sseResponse([progress('d1', 10), `event: error\ndata: {"error": {"code": "unavailable", "message": "ingestion is down"}}\n\n`]),
    )
    await expect(api.watchProgress('kb1', () => {}, new AbortController().signal)).rejects.toThrow('ingestion is down')
  })
})
