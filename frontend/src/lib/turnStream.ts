/**
 * A chat turn as a stream of events, resumed across dropped connections.
 *
 * `POST /api/v1/chat/turns` streams the turn's events (`ChatTurnEvent` JSON; SSE `id:` = sequence,
 * `event:` = kind). When the connection drops before the final event, the turn is read again from
 * `GET /api/v1/chat/turns/{turn_id}/events` with `Last-Event-ID` = the last sequence applied; an event
 * whose sequence was already applied is skipped, so none is applied twice, and a sequence that skips
 * ahead sends the reader back once to fetch what it missed. The answer text is assembled from
 * `text_delta` (and replaced by `completed`'s whole text), sources come from `sources`, `citations` and
 * `completed`, tool activity from `tool_started` / `tool_finished`, handoffs from `handoff`. A turn
 * ends with exactly one final event — `completed`, `error` or `cancelled`; anything after it is ignored.
 *
 * The state is a plain object mutated in place: give a Vue `reactive()` object as `state` and the view
 * follows the turn with no glue.
 */

import { ApiError, BAD_RESPONSE, parseJson, sleep as pause, type TurnRequest } from './api'
import { mergeSources, sourceFromJson, type Source, type SourceJson } from './citations'
import { readSse, SseParser, StreamInterrupted } from './sse'

/** The kinds of `TurnEventKind` (libs/contracts/…/events.py). */
export type TurnEventKind =
  | 'started'
  | 'intent'
  | 'handoff'
  | 'tool_started'
  | 'tool_finished'
  | 'sources'
  | 'compacted'
  | 'text_delta'
  | 'citations'
  | 'error'
  | 'completed'
  | 'cancelled'

export const FINAL_KINDS: ReadonlySet<string> = new Set(['completed', 'error', 'cancelled'])

/** A `ChatTurnEvent` as JSON (the fields the UI reads). */
export interface TurnEvent {
  turn_id: string
  sequence: number
  kind: TurnEventKind
  text?: string | null
  citations?: SourceJson[]
  intent?: string | null
  tool_call_id?: string | null
  tool_name?: string | null
  tool_ok?: boolean | null
  duration_ms?: number | null
  attempts?: number | null
  from_agent_id?: string | null
  to_agent_id?: string | null
  reason?: string | null
  answer_kind?: string | null
  error_code?: string | null
  error_message?: string | null
}

export type TurnStatus = 'connecting' | 'streaming' | 'reconnecting' | 'completed' | 'error' | 'cancelled'

export interface ToolActivity {
  id: string
  name: string
  status: 'running' | 'ok' | 'failed'
  durationMs: number | null
  attempts: number | null
  error: string
}

export interface Handoff {
  from: string
  to: string
  reason: string
}

export interface TurnState {
  /** Known from the first event on. */
  turnId: string
  status: TurnStatus
  text: string
  /** The turn's numbered sources, by number. */
  sources: Source[]
  tools: ToolActivity[]
  handoffs: Handoff[]
  intent: string
  /** `generated`, `extracted` or `fixed` once completed. */
  answerKind: string
  /** The sequence of the last event applied; -1 before the first. */
  lastSequence: number
  /** Connections opened again after a drop. */
  reconnects: number
  error: { code: string; message: string } | null
}

export function newTurnState(): TurnState {
  return {
    turnId: '',
    status: 'connecting',
    text: '',
    sources: [],
    tools: [],
    handoffs: [],
    intent: '',
    answerKind: '',
    lastSequence: -1,
    reconnects: 0,
    error: null,
  }
}

/** What a turn needs of the API client. */
export interface TurnApi {
  startTurn(request: TurnRequest, signal?: AbortSignal): Promise<Response>
  resumeTurn(turnId: string, lastSequence: number, signal?: AbortSignal): Promise<Response>
  cancelTurn(turnId: string): Promise<boolean>
}

export interface TurnOptions {
  /** The object to keep the turn's state in (a Vue `reactive()` one); a new one otherwise. */
  state?: TurnState
  /** Connections opened again in a row without a new event before giving up. */
  maxReconnects?: number
  /** The pause before the first reconnection (or the server's `retry:`); doubles each time. */
  reconnectDelayMs?: number
  maxReconnectDelayMs?: number
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
}

/** Codes of a turn's errors that the client, not the server, decided (the UI translates them). */
export const CONNECTION_LOST = 'connection_lost'
export const CLIENT_ERROR = 'client_error'

export const DEFAULT_MAX_RECONNECTS = 5
export const DEFAULT_RECONNECT_DELAY_MS = 500
export const DEFAULT_MAX_RECONNECT_DELAY_MS = 8_000

/** Something that ends reading one connection: a gap to fill or a drop to resume after. */
class Reconnect extends Error {}

export class TurnStream {
  readonly state: TurnState
  /** Settles with the state once the turn has ended (or the stream was closed). */
  readonly done: Promise<TurnState>

  private readonly controller = new AbortController()
  private readonly maxReconnects: number
  private readonly firstDelay: number
  private readonly maxDelay: number
  private readonly sleep: (ms: number, signal: AbortSignal) => Promise<void>
  private serverRetry: number | null = null
  private cancelWanted = false
  private cancelSent: Promise<boolean> | null = null
  /** The last sequence from which a gap sent the reader back: a gap seen again from it is accepted. */
  private gapRetriedAt = -2

  constructor(
    private readonly api: TurnApi,
    private readonly request: TurnRequest,
    options: TurnOptions = {},
  ) {
    this.state = options.state ?? newTurnState()
    this.maxReconnects = options.maxReconnects ?? DEFAULT_MAX_RECONNECTS
    this.firstDelay = options.reconnectDelayMs ?? DEFAULT_RECONNECT_DELAY_MS
    this.maxDelay = options.maxReconnectDelayMs ?? DEFAULT_MAX_RECONNECT_DELAY_MS
    this.sleep = options.sleep ?? pause
    this.done = this.run().then(() => this.state)
  }

  get finished(): boolean {
    return FINAL_KINDS.has(this.state.status)
  }

  /**
   * Asks the server to stop the turn; the stream then ends with its `cancelled` event. Before the
   * first event (no turn id yet) the request waits for it.
   */
  cancel(): Promise<boolean> {
    if (this.finished) return Promise.resolve(false)
    this.cancelWanted = true
    return this.sendCancel() ?? Promise.resolve(true)
  }

  /** Stops reading (the view went away); the turn goes on on the server. */
  close(): void {
    this.controller.abort()
  }

  private sendCancel(): Promise<boolean> | null {
    if (!this.cancelWanted || !this.state.turnId) return null
    this.cancelSent ??= this.api.cancelTurn(this.state.turnId).catch((error: unknown) => {
      this.cancelSent = null // asked again on the next event or call
      throw error
    })
    return this.cancelSent
  }

  private async run(): Promise<void> {
    const signal = this.controller.signal
    let failures = 0 // connections in a row that brought no new event
    while (!this.finished && !signal.aborted) {
      const before = this.state.lastSequence
      let refused: ApiError | null = null // a failing server's answer, when it gave one
      try {
        await this.readOnce(signal)
        if (this.finished || signal.aborted) return
        // The stream ended without a final event: the connection was cut.
      } catch (error) {
        if (signal.aborted) return
        if (error instanceof ApiError && (!error.retryable || !this.state.turnId)) {
          return this.fail(error.code, error.message) // refused, or failed before the turn had an id
        }
        if (!(error instanceof ApiError || error instanceof StreamInterrupted || error instanceof Reconnect)) {
          console.error('turn stream', error)
          return this.fail(CLIENT_ERROR, error instanceof Error ? error.message : String(error))
        }
        if (error instanceof ApiError && error.status > 0) refused = error
      }
      if (!this.state.turnId) {
        // Nothing says which turn to resume: the question may or may not have been queued.
        return this.fail(CONNECTION_LOST, 'the connection dropped before the turn started')
      }
      failures = this.state.lastSequence > before ? 1 : failures + 1
      if (failures > this.maxReconnects) {
        if (refused) return this.fail(refused.code, refused.message)
        return this.fail(CONNECTION_LOST, `the connection dropped ${failures} times in a row`)
      }
      this.state.status = 'reconnecting'
      const delay = Math.min((this.serverRetry ?? this.firstDelay) * 2 ** (failures - 1), this.maxDelay)
      await this.sleep(delay, signal)
      this.state.reconnects += 1
    }
  }

  /** Opens one connection (the question, or its resumption) and applies its events. */
  private async readOnce(signal: AbortSignal): Promise<void> {
    const response = this.state.turnId
      ? await this.api.resumeTurn(this.state.turnId, this.state.lastSequence, signal)
      : await this.api.startTurn(this.request, signal)
    if (this.state.status === 'connecting' || this.state.status === 'reconnecting') this.state.status = 'streaming'
    const parser = new SseParser()
    try {
      for await (const sse of readSse(response.body!, parser)) {
        if (this.serverRetry === null && parser.retry !== null) this.serverRetry = parser.retry
        const event = parseJson<TurnEvent>(sse.data)
        if (typeof event.sequence !== 'number') {
          if (!/^\d+$/.test(sse.id)) throw new ApiError(200, BAD_RESPONSE, 'an event without a sequence')
          event.sequence = Number(sse.id)
        }
        if (this.state.turnId && event.turn_id && event.turn_id !== this.state.turnId) continue // not ours
        if (event.sequence <= this.state.lastSequence) continue // seen before this connection
        if (event.sequence > this.state.lastSequence + 1 && this.gapRetriedAt !== this.state.lastSequence) {
          // Events are missing in between: read again from the last one applied, once.
          this.gapRetriedAt = this.state.lastSequence
          if (!this.state.turnId) this.state.turnId = event.turn_id // resumable even from the start
          throw new Reconnect('a gap in the sequence')
        }
        this.apply(event)
        if (this.finished) return
      }
    } finally {
      if (parser.retry !== null) this.serverRetry = parser.retry
    }
  }

  private apply(event: TurnEvent): void {
    const state = this.state
    if (!state.turnId) state.turnId = event.turn_id
    state.lastSequence = event.sequence
    switch (event.kind) {
      case 'intent':
        state.intent = event.intent ?? ''
        break
      case 'handoff':
        state.handoffs.push({
          from: event.from_agent_id ?? '',
          to: event.to_agent_id ?? '',
          reason: event.reason ?? '',
        })
        break
      case 'tool_started':
        state.tools.push({
          id: event.tool_call_id ?? `${event.sequence}`,
          name: event.tool_name ?? '',
          status: 'running',
          durationMs: null,
          attempts: null,
          error: '',
        })
        break
      case 'tool_finished': {
        const finished = {
          status: event.tool_ok === false ? 'failed' : 'ok',
          durationMs: event.duration_ms ?? null,
          attempts: event.attempts ?? null,
          error: event.error_message ?? '',
        } as const
        const tool = state.tools.find((t) => t.id === event.tool_call_id && t.status === 'running')
        if (tool) Object.assign(tool, finished)
        else state.tools.push({ id: event.tool_call_id ?? `${event.sequence}`, name: event.tool_name ?? '', ...finished })
        break
      }
      case 'sources':
      case 'citations':
        this.addSources(event.citations)
        break
      case 'text_delta':
        state.text += event.text ?? ''
        break
      case 'completed':
        if (typeof event.text === 'string') state.text = event.text
        this.addSources(event.citations)
        state.answerKind = event.answer_kind ?? ''
        state.status = 'completed'
        break
      case 'cancelled':
        if (typeof event.text === 'string') state.text = event.text
        state.status = 'cancelled'
        break
      case 'error':
        state.error = { code: event.error_code ?? 'error', message: event.error_message ?? '' }
        state.status = 'error'
        break
      default:
        break // started, compacted, and kinds this UI does not know yet
    }
    if (this.cancelWanted && !this.finished) void this.sendCancel()?.catch(() => {})
  }

  private addSources(citations: SourceJson[] | undefined): void {
    if (!citations?.length) return
    const known = new Map(this.state.sources.map((s) => [s.handle, s]))
    const more = citations.map(sourceFromJson).filter((s): s is Source => s !== null)
    this.state.sources = [...mergeSources(known, more).values()].sort((a, b) => a.number - b.number)
  }

  private fail(code: string, message: string): void {
    this.state.error = { code, message }
    this.state.status = 'error'
  }
}

/** Asks a question and follows its turn; see {@link TurnStream}. */
export function streamTurn(api: TurnApi, request: TurnRequest, options: TurnOptions = {}): TurnStream {
  return new TurnStream(api, request, options)
}
