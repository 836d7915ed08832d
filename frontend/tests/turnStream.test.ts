import { describe, expect, it } from 'vitest'

import { ApiClient, sessionCredentials } from '../src/lib/api'
import { CONNECTION_LOST, newTurnState, streamTurn, type TurnOptions, type TurnState } from '../src/lib/turnStream'
import { fakeFetch, jsonResponse, memoryStorage, sseResponse, turnEvent, type Answer } from './fakeFetch'

const T = 'turn-1'
const SOURCE = { handle: 'c1', file_name: 'handbook.pdf', page: 2, heading_path: ['Tests'], snippet: 'make test' }
const DELTAS = ['Run ', 'make ', 'test', '[[c1]]', '.']
const ANSWER = DELTAS.join('')

/** The events of a whole turn, by sequence. */
const EVENTS = [
  turnEvent(T, 0, 'started'),
  turnEvent(T, 1, 'tool_started', { tool_call_id: 'call-1', tool_name: 'search_knowledge_base' }),
  turnEvent(T, 2, 'sources', { citations: [SOURCE] }),
  turnEvent(T, 3, 'tool_finished', { tool_call_id: 'call-1', tool_name: 'search_knowledge_base', tool_ok: true, duration_ms: 40 }),
  ...DELTAS.map((text, i) => turnEvent(T, 4 + i, 'text_delta', { text })),
  turnEvent(T, 9, 'completed', { text: ANSWER, citations: [{ ...SOURCE, document_id: 'd1' }], answer_kind: 'generated' }),
]

function client(...answers: Answer[]) {
  const fake = fakeFetch(...answers)
  const store = sessionCredentials(memoryStorage())
  store.save({ kind: 'token', token: 'ks_secret' })
  return { api: new ApiClient({ fetch: fake.fetch, credentials: store }), requests: fake.requests }
}

const NO_WAIT: TurnOptions = { sleep: async () => {} }

/** A turn state that records every text it is given, as a view would show it. */
function textRecordingState(): { state: TurnState; texts: string[] } {
  const texts: string[] = []
  const state = new Proxy(newTurnState(), {
    set(target, key, value) {
      if (key === 'text') texts.push(value as string)
      return Reflect.set(target, key, value)
    },
  })
  return { state, texts }
}

describe('a chat turn', () => {
  it('assembles the answer, sources and tool activity, and ends on its final event', async () => {
    const { api, requests } = client(() => sseResponse(EVENTS))
    const turn = streamTurn(api, { message: 'How do I run the tests?', knowledge_base_ids: ['kb1'] }, NO_WAIT)
    const state = await turn.done
    expect(state).toMatchObject({ turnId: T, status: 'completed', text: ANSWER, answerKind: 'generated', lastSequence: 9 })
    expect(state.sources).toHaveLength(1)
    expect(state.sources[0]).toMatchObject({ handle: 'c1', fileName: 'handbook.pdf', page: 2, documentId: 'd1' })
    expect(state.tools).toEqual([
      { id: 'call-1', name: 'search_knowledge_base', status: 'ok', durationMs: 40, attempts: null, error: '' },
    ])
    expect(requests).toHaveLength(1)
    expect(requests[0].method).toBe('POST')
    expect(requests[0].url).toBe('/api/v1/chat/turns')
    expect(requests[0].headers.get('authorization')).toBe('Bearer ks_secret')
    expect(JSON.parse(String(requests[0].body))).toEqual({ message: 'How do I run the tests?', knowledge_base_ids: ['kb1'] })
  })

  it('resumes after a drop in the middle of an event with Last-Event-ID, without repeating or losing a delta', async () => {
    // The first connection delivers events 0..5 (the deltas "Run ", "make ") and is cut inside event 6.
    const cutInside = EVENTS[6].slice(0, 30)
    const { api, requests } = client(
      () => sseResponse([EVENTS.slice(0, 4).join(''), EVENTS[4] + EVENTS[5].slice(0, 17), EVENTS[5].slice(17), cutInside], { drop: true }),
      // The resumption repeats 4 and 5 (as a server replaying from an older point would) and goes on.
      () => sseResponse([': ping\n\n', ...EVENTS.slice(4)]),
    )
    const seen: string[] = []
    const recorded = textRecordingState()
    const turn = streamTurn(api, { message: 'q' }, { state: recorded.state, sleep: async () => void seen.push('paused') })
    const state = await turn.done

    expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual(['POST /api/v1/chat/turns', `GET /api/v1/chat/turns/${T}/events`])
    expect(requests[1].headers.get('last-event-id')).toBe('5')
    expect(requests[1].headers.get('authorization')).toBe('Bearer ks_secret')
    expect(state.status).toBe('completed')
    expect(state.reconnects).toBe(1)
    expect(seen).toEqual(['paused'])
    // What the reader saw grow: each delta once, in order, then the completed event's whole text.
    expect(recorded.texts).toEqual([...DELTAS.map((_, i) => DELTAS.slice(0, i + 1).join('')), ANSWER])
    expect(state.text).toBe(ANSWER)
  })

  it('assembles the same text from the deltas alone when the turn is cut before its final event', async () => {
    const { api, requests } = client(
      () => sseResponse(EVENTS.slice(0, 6), { drop: true }),
      () => sseResponse(EVENTS.slice(5, 9), { drop: true }), // 5 again, then 6..8, dropped again
      () => sseResponse([...EVENTS.slice(7, 9), turnEvent(T, 9, 'cancelled', { text: null })]),
    )
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(requests.slice(1).map((r) => r.headers.get('last-event-id'))).toEqual(['5', '8'])
    expect(state.status).toBe('cancelled')
    expect(state.text).toBe(ANSWER) // every delta exactly once
  })

  it('goes back for events missing in the sequence', async () => {
    const { api, requests } = client(
      () => sseResponse([...EVENTS.slice(0, 5), EVENTS[7]]), // 5 and 6 never arrive
      () => sseResponse(EVENTS.slice(5)),
    )
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(requests[1].headers.get('last-event-id')).toBe('4')
    expect(state.text).toBe(ANSWER)
    expect(state.status).toBe('completed')
  })

  it('reads a turn from its start when its first events never arrived', async () => {
    const { api, requests } = client(
      () => sseResponse(EVENTS.slice(2)), // 0 and 1 missing
      () => sseResponse(EVENTS),
    )
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(requests[1].url).toBe(`/api/v1/chat/turns/${T}/events`)
    expect(requests[1].headers.get('last-event-id')).toBe('-1') // the gateway reads it as "from the start"
    expect(state.tools).toHaveLength(1)
    expect(state.text).toBe(ANSWER)
  })

  it('surfaces a 404 on resume (a turn that is not the caller\'s) as the turn\'s error, without retrying', async () => {
    const { api, requests } = client(
      () => sseResponse(EVENTS.slice(0, 3), { drop: true }),
      () => jsonResponse(404, { error: { code: 'not_found', message: `turn ${T} not found` } }),
    )
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(state.status).toBe('error')
    expect(state.error).toEqual({ code: 'not_found', message: `turn ${T} not found` })
    expect(requests).toHaveLength(2)
  })

  it('retries a failing resumption, then gives up after the allowed reconnections', async () => {
    const unavailable = () => jsonResponse(503, { error: { code: 'unavailable', message: 'conversation is down' } })
    const { api, requests } = client(() => sseResponse(EVENTS.slice(0, 2), { drop: true }), unavailable, unavailable)
    const state = await streamTurn(api, { message: 'q' }, { ...NO_WAIT, maxReconnects: 2 }).done
    expect(requests).toHaveLength(3) // the question, then the 2 reconnections allowed
    expect(state.error).toEqual({ code: 'unavailable', message: 'conversation is down' })
  })

  it('gives up on a connection that keeps dropping without a new event', async () => {
    const { api, requests } = client(
      () => sseResponse(EVENTS.slice(0, 2), { drop: true }),
      () => sseResponse([EVENTS[1]], { drop: true }),
      () => sseResponse([], { drop: true }),
    )
    const state = await streamTurn(api, { message: 'q' }, { ...NO_WAIT, maxReconnects: 2 }).done
    expect(requests).toHaveLength(3)
    expect(state.error?.code).toBe(CONNECTION_LOST)
    expect(state.reconnects).toBe(2)
  })

  it('reports a refusal of the question with the server\'s message', async () => {
    const { api } = client(() =>
      jsonResponse(404, { error: { code: 'not_found', message: 'session s9 not found', field: 'session_id' } }),
    )
    const state = await streamTurn(api, { message: 'q', session_id: 's9' }, NO_WAIT).done
    expect(state.error).toEqual({ code: 'not_found', message: 'session s9 not found' })
  })

  it('cannot resume a turn cut before its first event', async () => {
    const { api, requests } = client(() => sseResponse([], { drop: true }))
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(state.error?.code).toBe(CONNECTION_LOST)
    expect(requests).toHaveLength(1)
  })

  it('ignores anything after the final event', async () => {
    const { api } = client(() => sseResponse([...EVENTS, turnEvent(T, 10, 'text_delta', { text: 'late' })]))
    const state = await streamTurn(api, { message: 'q' }, NO_WAIT).done
    expect(state.text).toBe(ANSWER)
    expect(state.lastSequence).toBe(9)
  })

  it('sends a cancel asked before the first event once the turn id is known', async () => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => (release = resolve))
    const { api, requests } = client(
      async () => {
        await gate
        return sseResponse([EVENTS[0], EVENTS[1]], { drop: true })
      },
      () => jsonResponse(200, { cancelled: true }),
      () => sseResponse([turnEvent(T, 2, 'cancelled', { text: '' })]),
    )
    const turn = streamTurn(api, { message: 'q' }, NO_WAIT)
    const asked = turn.cancel()
    release()
    const state = await turn.done
    await asked
    expect(requests.map((r) => `${r.method} ${r.url}`)).toContain(`POST /api/v1/chat/turns/${T}/cancel`)
    expect(state.status).toBe('cancelled')
  })
})
