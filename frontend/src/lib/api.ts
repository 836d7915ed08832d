/**
 * The client of the gateway's management API (`/api/v1`), exactly as the gateway's routes answer
 * (services/gateway/src/knowsphere_gateway/api/*.py): JSON whose fields are the proto field names,
 * enums as lower-case names (`ready`, `assistant`), timestamps as RFC 3339 strings.
 *
 * Credentials are an API token entered at login, kept in sessionStorage (gone with the tab; no cookie
 * is ever set) and sent as `Authorization: Bearer` on every call — or none at all in the gateway's
 * local single-user mode (`make up`: loopback only, no token, the caller is the local admin). Every
 * error answer has one shape, `{"error": {"code", "message", "field"?, "correlation_id"?}}`; it is
 * raised as an {@link ApiError} carrying the server's message.
 */

import type { SourceJson } from './citations'
import { readSse, StreamInterrupted } from './sse'

export const API_BASE = '/api/v1'

/** Codes of failures that have no answer from the server (the UI translates them). */
export const NETWORK_ERROR = 'network_error'
export const BAD_RESPONSE = 'bad_response'

export class ApiError extends Error {
  constructor(
    /** The HTTP status; 0 when no answer arrived. */
    readonly status: number,
    readonly code: string,
    message: string,
    readonly field?: string,
    readonly correlationId?: string,
  ) {
    super(message)
    this.name = 'ApiError'
  }

  /** Whether asking again later may succeed: no answer, a busy or failing server, a timeout. */
  get retryable(): boolean {
    return this.status === 0 || this.status === 408 || this.status === 429 || (this.status >= 500 && this.status !== 501)
  }
}

interface ErrorBody {
  code?: string
  message?: string
  field?: string
  correlation_id?: string
}

/** The error of a failed response, from its JSON body when it has the gateway's shape. */
export async function errorFromResponse(response: Response): Promise<ApiError> {
  let body: unknown = null
  try {
    body = await response.json()
  } catch {
    // not JSON (a proxy's error page): the status says what there is to say
  }
  const error = (body as { error?: ErrorBody } | null)?.error
  if (error && typeof error.message === 'string') {
    return new ApiError(response.status, error.code ?? 'error', error.message, error.field, error.correlation_id)
  }
  const reason = response.statusText ? ` ${response.statusText}` : ''
  return new ApiError(response.status, `http_${response.status}`, `HTTP ${response.status}${reason}`)
}

// --- credentials ---------------------------------------------------------------------------------

export type Credentials = { kind: 'token'; token: string } | { kind: 'local' }

export interface CredentialStore {
  load(): Credentials | null
  save(credentials: Credentials): void
  clear(): void
}

const CREDENTIALS_KEY = 'knowsphere.credentials'

/** Credentials kept in `storage` (the tab's sessionStorage by default): gone when the tab closes. */
export function sessionCredentials(storage: Storage | undefined = globalThis.sessionStorage): CredentialStore {
  let memory: Credentials | null = null // when the browser refuses storage (private modes)
  return {
    load() {
      try {
        const raw = storage?.getItem(CREDENTIALS_KEY)
        if (raw) {
          const parsed = JSON.parse(raw) as Credentials
          if (parsed.kind === 'local' || (parsed.kind === 'token' && typeof parsed.token === 'string')) return parsed
        }
      } catch {
        // unreadable: treated as signed out
      }
      return memory
    },
    save(credentials) {
      memory = credentials
      try {
        storage?.setItem(CREDENTIALS_KEY, JSON.stringify(credentials))
      } catch {
        // kept in memory only
      }
    },
    clear() {
      memory = null
      try {
        storage?.removeItem(CREDENTIALS_KEY)
      } catch {
        // nothing stored
      }
    },
  }
}

// --- what the API answers -----------------------------------------------------------------------

export type DocumentStatus =
  | 'queued'
  | 'parsing'
  | 'chunking'
  | 'embedding'
  | 'indexing'
  | 'graph'
  | 'ready'
  | 'failed'

export const DOCUMENT_STATUSES: readonly DocumentStatus[] = [
  'queued',
  'parsing',
  'chunking',
  'embedding',
  'indexing',
  'graph',
  'ready',
  'failed',
]

/** How documents are cut into passages (ingestion's ChunkingStrategy). */
export const CHUNKING_STRATEGIES = ['heading', 'parent_child'] as const
export type ChunkingStrategy = (typeof CHUNKING_STRATEGIES)[number]
/** The strategy of a knowledge base created without chunking settings. */
export const DEFAULT_CHUNKING_STRATEGY: ChunkingStrategy = 'heading'

export type ChunkSize = 'chunk_size_tokens' | 'chunk_overlap_tokens' | 'parent_size_tokens' | 'child_size_tokens'
export const CHUNK_SIZE_NAMES: readonly ChunkSize[] = [
  'chunk_size_tokens',
  'chunk_overlap_tokens',
  'parent_size_tokens',
  'child_size_tokens',
]

/** The sizes each strategy reads (ingestion's ChunkingSettings.to_config); it ignores the others. */
export const CHUNK_SIZES: Record<ChunkingStrategy, readonly ChunkSize[]> = {
  heading: ['chunk_size_tokens', 'chunk_overlap_tokens'],
  parent_child: ['parent_size_tokens', 'child_size_tokens', 'chunk_overlap_tokens'],
}

/** A knowledge base's chunking: sizes in tokens, 0 for the server's default. */
export type ChunkingConfig = { strategy: ChunkingStrategy | null } & Record<ChunkSize, number>

/** Chunking in a request: it replaces the whole set; a size left out takes the server's default. */
export type ChunkingBody = { strategy: ChunkingStrategy } & Partial<Record<ChunkSize, number>>

export type MigrationState = 'running' | 'completed' | 'failed'

/** The latest change of a knowledge base's embedding model: every document embedded again. */
export interface EmbeddingMigration {
  from_model_id: string
  to_model_id: string
  state: MigrationState | null
  documents_done: number
  documents_total: number
  /** Why it failed; the old model stays in use then. */
  failure_reason: string
  start_time: string | null
  end_time: string | null
}

export interface KnowledgeBase {
  id: string
  name: string
  description: string
  embedding_model_id: string
  embedding_dimension: number
  chunking: ChunkingConfig | null
  graph_enabled: boolean
  language_hint: string
  document_count: number
  chunk_count: number
  size_bytes: number
  /** The latest embedding migration; null when there was none. */
  migration: EmbeddingMigration | null
  create_time: string | null
  update_time: string | null
}

export interface StageFailure {
  stage: string | null
  code: string
  reason: string
  attempts: number
  time: string | null
}

export interface DocumentProgress {
  document_id: string
  knowledge_base_id: string
  status: DocumentStatus | null
  percent: number
  pages_parsed: number
  pages_total: number
  chunks_total: number
  chunks_embedded: number
  chunks_indexed: number
  chunks_graphed: number
  eta_seconds: number | null
  failure: StageFailure | null
  update_time: string | null
}

export interface KbDocument {
  id: string
  knowledge_base_id: string
  file_name: string
  content_type: string
  size_bytes: number
  status: DocumentStatus | null
  failure: StageFailure | null
  warnings: StageFailure[]
  progress: DocumentProgress | null
  title: string
  page_count: number
  chunk_count: number
  language: string
  create_time: string | null
  update_time: string | null
}

export interface FileType {
  extension: string
  content_types: string[]
  missing_components: string[]
}

export interface UploadPolicy {
  max_file_size_bytes: number
  file_types: FileType[]
  recommended_chunk_size_bytes: number
  max_files_per_upload: number
  batch_max_documents: number
}

export interface UploadResult {
  file_name: string
  document: KbDocument | null
  duplicate: boolean
  error: ErrorBody | null
}

export interface Session {
  id: string
  title: string
  orchestrator_id: string
  agent_id: string
  application_id: string
  turn_count: number
  create_time: string | null
  update_time: string | null
}

export interface StoredMessage {
  id: string
  session_id: string
  turn_id: string
  role: 'user' | 'assistant' | 'tool' | null
  content: { text?: string | null }[]
  citations: SourceJson[]
  agent_id: string
  status: 'in_progress' | 'completed' | 'cancelled' | 'failed' | null
  create_time: string | null
}

/** The body of `POST /api/v1/chat/turns` (`ChatTurnRequest`). */
export interface TurnRequest {
  message: string
  knowledge_base_ids?: string[]
  session_id?: string
  web_search?: boolean
  knowledge_graph?: boolean
  language?: string
  /** Images to ask about: http(s) or `data:image/…;base64` URLs (src/lib/images.ts keeps the limits). */
  images?: string[]
}

export interface KnowledgeBaseCreate {
  name: string
  description?: string
  /** Left out: the tenant's default embedding model (one reading the language when the default does
   * not), recorded with the knowledge base. */
  embedding_model_id?: string
  /** Left out: the server's default chunking. */
  chunking?: ChunkingBody
  /** Extraction needs a knowledge-QA model. */
  graph_enabled?: boolean
  /** BCP-47; empty: detect per document. */
  language_hint?: string
}

/** The body of `PATCH /api/v1/knowledge-bases/{id}`: the fields to change, no others. A new embedding
 * model starts a migration that embeds every document again; `chunking` replaces the whole set. */
export interface KnowledgeBaseUpdate {
  name?: string
  description?: string
  embedding_model_id?: string
  chunking?: ChunkingBody
  graph_enabled?: boolean
  language_hint?: string
}

/** Language hints the forms offer by name; any other BCP-47 tag can be typed. */
export const COMMON_LANGUAGE_HINTS: readonly string[] = ['zh', 'en', 'ja', 'ko', 'de', 'fr', 'es']

/** A language hint as people read it in `locale`: `German (de)`; the tag itself when unknown. */
export function languageName(tag: string, locale: string): string {
  try {
    const name = new Intl.DisplayNames([locale], { type: 'language' }).of(tag)
    return name && name !== tag ? `${name} (${tag})` : tag
  } catch {
    return tag
  }
}

/** Files that fit in one batch upload request, whatever the policy allows (the gateway's default cap). */
export const MAX_FILES_PER_REQUEST = 100
/** Bytes sent in one batch upload request, well under the gateway's default body limit (1 GiB). */
export const MAX_BYTES_PER_REQUEST = 256 * 1024 * 1024
/** Pages of a list read at most when the whole list is wanted. */
export const MAX_PAGES = 50

// --- the client ---------------------------------------------------------------------------------

type Query = Record<string, string | number | boolean | string[] | undefined>

interface RequestOptions {
  query?: Query
  json?: unknown
  body?: BodyInit
  headers?: Record<string, string>
  signal?: AbortSignal
  /** Credentials for this call only (logging in); the stored ones otherwise. */
  credentials?: Credentials | null
}

export interface ApiClientOptions {
  fetch?: typeof fetch
  credentials?: CredentialStore
  /** The UI's language, sent as `Accept-Language` so the server's messages come in it. */
  language?: () => string
}

export class ApiClient {
  readonly credentials: CredentialStore
  private readonly fetcher: typeof fetch
  private readonly language: () => string
  private unauthorized: ((error: ApiError) => void) | null = null

  constructor(options: ApiClientOptions = {}) {
    this.credentials = options.credentials ?? sessionCredentials()
    // Looked up at each call, and called unbound: a browser's fetch refuses a `this` other than the window.
    this.fetcher = (input, init) => (options.fetch ?? globalThis.fetch)(input, init)
    this.language = options.language ?? (() => '')
  }

  /** Called when the stored credentials are refused (401): the token was revoked or has expired. */
  onUnauthorized(handler: (error: ApiError) => void): void {
    this.unauthorized = handler
  }

  get signedIn(): boolean {
    return this.credentials.load() !== null
  }

  signOut(): void {
    this.credentials.clear()
  }

  /** The response of a call, whatever its status; an {@link ApiError} when no answer arrived. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = { ...options.headers }
    const credentials = options.credentials !== undefined ? options.credentials : this.credentials.load()
    if (credentials?.kind === 'token') headers.Authorization = `Bearer ${credentials.token}`
    const language = this.language()
    if (language) headers['Accept-Language'] = language
    let body = options.body
    if (options.json !== undefined) {
      headers['Content-Type'] = 'application/json'
      body = JSON.stringify(options.json)
    }
    try {
      return await this.fetcher(url(path, options.query), {
        method,
        headers,
        body,
        signal: options.signal,
        credentials: 'omit', // the API takes no cookies; none are sent
        cache: 'no-store',
      })
    } catch (error) {
      if (options.signal?.aborted) throw error
      throw new ApiError(0, NETWORK_ERROR, error instanceof Error ? error.message : String(error))
    }
  }

  /** A call's response when it succeeded; its {@link ApiError} otherwise. */
  async ok(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const response = await this.send(method, path, options)
    if (response.ok) return response
    const error = await errorFromResponse(response)
    if (error.status === 401 && options.credentials === undefined) this.unauthorized?.(error)
    throw error
  }

  /** A call's JSON answer (undefined for 204). */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.ok(method, path, options)
    if (response.status === 204) return undefined as T
    try {
      return (await response.json()) as T
    } catch {
      throw new ApiError(response.status, BAD_RESPONSE, `${method} ${path}: the answer is not JSON`)
    }
  }

  /** An event stream's response once it has started (a refusal before it is a JSON error). */
  async stream(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const response = await this.ok(method, path, {
      ...options,
      headers: { Accept: 'text/event-stream', ...options.headers },
    })
    if (!response.body || !(response.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
      throw new ApiError(response.status, BAD_RESPONSE, `${method} ${path}: the answer is not an event stream`)
    }
    return response
  }

  // --- signing in ---

  /**
   * Whether the gateway answers without a token (its local single-user mode): any answer but 401 to
   * an unauthenticated read. An {@link ApiError} when the gateway cannot be reached.
   */
  async tokenless(): Promise<boolean> {
    const response = await this.send('GET', `${API_BASE}/knowledge-bases`, {
      query: { page_size: 1 },
      credentials: null,
    })
    return response.status !== 401
  }

  /** Keeps `credentials` once the gateway accepts them; the refusal (401, 403) as an {@link ApiError}. */
  async signIn(credentials: Credentials): Promise<void> {
    const response = await this.send('GET', `${API_BASE}/knowledge-bases`, {
      query: { page_size: 1 },
      credentials,
    })
    if (response.status === 401 || response.status === 403) throw await errorFromResponse(response)
    // Any other answer means the credentials passed authentication (a failing service is not theirs).
    this.credentials.save(credentials)
  }

  // --- knowledge bases and documents ---

  async listKnowledgeBases(signal?: AbortSignal): Promise<KnowledgeBase[]> {
    return this.all<KnowledgeBase>(`${API_BASE}/knowledge-bases`, 'knowledge_bases', {}, signal)
  }

  getKnowledgeBase(id: string, signal?: AbortSignal): Promise<KnowledgeBase> {
    return this.json('GET', `${API_BASE}/knowledge-bases/${enc(id)}`, { signal })
  }

  createKnowledgeBase(body: KnowledgeBaseCreate): Promise<KnowledgeBase> {
    return this.json('POST', `${API_BASE}/knowledge-bases`, { json: body })
  }

  /** Changes the fields `body` gives; the knowledge base as it is afterwards. */
  updateKnowledgeBase(id: string, body: KnowledgeBaseUpdate): Promise<KnowledgeBase> {
    return this.json('PATCH', `${API_BASE}/knowledge-bases/${enc(id)}`, { json: body })
  }

  deleteKnowledgeBase(id: string): Promise<void> {
    return this.json('DELETE', `${API_BASE}/knowledge-bases/${enc(id)}`)
  }

  /** One page of a knowledge base's documents, newest first. */
  listDocuments(
    kbId: string,
    pageToken = '',
    signal?: AbortSignal,
  ): Promise<{ documents: KbDocument[]; next_page_token: string }> {
    return this.json('GET', `${API_BASE}/knowledge-bases/${enc(kbId)}/documents`, {
      query: { page_token: pageToken || undefined },
      signal,
    })
  }

  getDocument(id: string, signal?: AbortSignal): Promise<KbDocument> {
    return this.json('GET', `${API_BASE}/documents/${enc(id)}`, { signal })
  }

  deleteDocument(id: string): Promise<void> {
    return this.json('DELETE', `${API_BASE}/documents/${enc(id)}`)
  }

  reingestDocument(id: string): Promise<KbDocument> {
    return this.json('POST', `${API_BASE}/documents/${enc(id)}/reingest`)
  }

  uploadPolicy(signal?: AbortSignal): Promise<UploadPolicy> {
    return this.json('GET', `${API_BASE}/upload-policy`, { signal })
  }

  /**
   * Uploads `files` into a knowledge base with the batch route, as few requests as the limits allow
   * (at most `maxFiles` files and {@link MAX_BYTES_PER_REQUEST} bytes each), one result per file in
   * order. A request refused as too large (413) is split and sent again; a single file refused so gets
   * the server's error as its result. `onResults` hears each request's results as they come.
   */
  async uploadDocuments(
    kbId: string,
    files: File[],
    maxFiles: number,
    onResults?: (results: UploadResult[], files: File[]) => void,
  ): Promise<UploadResult[]> {
    const limit = Math.max(1, Math.min(maxFiles || MAX_FILES_PER_REQUEST, MAX_FILES_PER_REQUEST))
    const results: UploadResult[] = []
    for (const batch of batches(files, limit, MAX_BYTES_PER_REQUEST)) {
      const answered = await this.uploadBatch(kbId, batch)
      onResults?.(answered, batch)
      results.push(...answered)
    }
    return results
  }

  private async uploadBatch(kbId: string, files: File[]): Promise<UploadResult[]> {
    const form = new FormData()
    for (const file of files) form.append('file', file, file.name)
    try {
      const answer = await this.json<{ results: UploadResult[] }>(
        'POST',
        `${API_BASE}/knowledge-bases/${enc(kbId)}/documents/batch`,
        { body: form },
      )
      return answer.results
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 413) throw error
      if (files.length === 1) {
        return [{ file_name: files[0].name, document: null, duplicate: false, error: errorBody(error) }]
      }
      const half = Math.ceil(files.length / 2)
      return [
        ...(await this.uploadBatch(kbId, files.slice(0, half))),
        ...(await this.uploadBatch(kbId, files.slice(half))),
      ]
    }
  }

  /**
   * Follows the progress of every document of a knowledge base (`event: progress`, a
   * DocumentProgress) until `signal` aborts. A dropped stream is opened again — the watch starts with
   * the current state, so nothing is missed — after a pause that doubles while it keeps dropping. An
   * `event: error` from the server, or a refusal (a deleted knowledge base, a revoked token), ends it
   * with an {@link ApiError}.
   */
  async watchProgress(
    kbId: string,
    onProgress: (progress: DocumentProgress) => void,
    signal: AbortSignal,
    pause: (ms: number, signal: AbortSignal) => Promise<void> = sleep,
  ): Promise<void> {
    let delay = PROGRESS_FIRST_DELAY_MS
    while (!signal.aborted) {
      try {
        const response = await this.stream('GET', `${API_BASE}/knowledge-bases/${enc(kbId)}/progress`, { signal })
        for await (const event of readSse(response.body!)) {
          if (event.event === 'error') {
            const body = parseJson<{ error?: ErrorBody }>(event.data).error ?? {}
            throw new ApiError(200, body.code ?? 'error', body.message ?? event.data, body.field, body.correlation_id)
          }
          if (event.event === 'progress') {
            onProgress(parseJson<DocumentProgress>(event.data))
            delay = PROGRESS_FIRST_DELAY_MS
          }
        }
      } catch (error) {
        if (signal.aborted) return
        // A connection cut or a server failing for now: opened again below. Anything else ends the watch.
        const dropped = error instanceof StreamInterrupted || (error instanceof ApiError && error.retryable)
        if (!dropped) throw error
      }
      if (signal.aborted) return
      await pause(delay, signal)
      delay = Math.min(delay * 2, PROGRESS_MAX_DELAY_MS)
    }
  }

  // --- retrieval testing ---

  search(
    kbId: string,
    body: { query: string; top_k?: number; mode?: 'hybrid' | 'vector' | 'bm25' },
    signal?: AbortSignal,
  ): Promise<unknown> {
    return this.json('POST', `${API_BASE}/knowledge-bases/${enc(kbId)}/search`, { json: body, signal })
  }

  // --- sessions and chat ---

  async listSessions(signal?: AbortSignal): Promise<Session[]> {
    const page = await this.json<{ sessions: Session[] }>('GET', `${API_BASE}/sessions`, { signal })
    return page.sessions
  }

  createSession(title = ''): Promise<Session> {
    return this.json('POST', `${API_BASE}/sessions`, { json: title ? { title } : {} })
  }

  deleteSession(id: string): Promise<void> {
    return this.json('DELETE', `${API_BASE}/sessions/${enc(id)}`)
  }

  /** A session's questions and answers, oldest first. */
  listMessages(sessionId: string, signal?: AbortSignal): Promise<StoredMessage[]> {
    return this.all<StoredMessage>(
      `${API_BASE}/sessions/${enc(sessionId)}/messages`,
      'messages',
      { oldest_first: true },
      signal,
    )
  }

  /** Asks a question: the turn's event stream (`id:` = sequence, `event:` = kind). */
  startTurn(request: TurnRequest, signal?: AbortSignal): Promise<Response> {
    return this.stream('POST', `${API_BASE}/chat/turns`, { json: request, signal })
  }

  /** The turn's events after `lastSequence`, then the live ones (`Last-Event-ID`). */
  resumeTurn(turnId: string, lastSequence: number, signal?: AbortSignal): Promise<Response> {
    return this.stream('GET', `${API_BASE}/chat/turns/${enc(turnId)}/events`, {
      headers: { 'Last-Event-ID': String(lastSequence) },
      signal,
    })
  }

  /** Stops a running turn; it ends with a `cancelled` event. False when it had already ended. */
  async cancelTurn(turnId: string): Promise<boolean> {
    const answer = await this.json<{ cancelled: boolean }>('POST', `${API_BASE}/chat/turns/${enc(turnId)}/cancel`)
    return answer.cancelled
  }

  /** Every item of a paged list (up to {@link MAX_PAGES} pages). */
  private async all<T>(path: string, key: string, query: Query, signal?: AbortSignal): Promise<T[]> {
    const items: T[] = []
    let token = ''
    for (let page = 0; page < MAX_PAGES; page++) {
      const answer = await this.json<Record<string, unknown>>('GET', path, {
        query: { ...query, page_token: token || undefined },
        signal,
      })
      items.push(...((answer[key] as T[] | undefined) ?? []))
      token = (answer.next_page_token as string | undefined) ?? ''
      if (!token) break
    }
    return items
  }
}

const PROGRESS_FIRST_DELAY_MS = 500
const PROGRESS_MAX_DELAY_MS = 10_000

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** `data` parsed as JSON; a {@link BAD_RESPONSE} error when it is not JSON. */
export function parseJson<T>(data: string): T {
  try {
    return JSON.parse(data) as T
  } catch {
    throw new ApiError(200, BAD_RESPONSE, `an event's data is not JSON: ${data.slice(0, 80)}`)
  }
}

function enc(id: string): string {
  return encodeURIComponent(id)
}

function url(path: string, query?: Query): string {
  if (!query) return path
  const params = new URLSearchParams()
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined) continue
    if (Array.isArray(value)) value.forEach((item) => params.append(key, item))
    else params.append(key, String(value))
  }
  const search = params.toString()
  return search ? `${path}?${search}` : path
}

function errorBody(error: ApiError): ErrorBody {
  return { code: error.code, message: error.message, field: error.field }
}

/** `files` in order, cut into runs of at most `maxFiles` files and `maxBytes` bytes (a larger file alone). */
export function batches(files: File[], maxFiles: number, maxBytes: number): File[][] {
  const out: File[][] = []
  let run: File[] = []
  let bytes = 0
  for (const file of files) {
    if (run.length > 0 && (run.length >= maxFiles || bytes + file.size > maxBytes)) {
      out.push(run)
      run = []
      bytes = 0
    }
    run.push(file)
    bytes += file.size
  }
  if (run.length > 0) out.push(run)
  return out
}

// --- a knowledge base's settings: what the forms hold, and their request bodies -------------------------

/** The configuration the create form and the settings form edit. */
export interface KnowledgeBaseSettingsDraft {
  /** Empty: the tenant's default (when creating). */
  embedding_model_id: string
  strategy: ChunkingStrategy
  /** Sizes in tokens; null: the server's default. Only the strategy's own ({@link CHUNK_SIZES}) are sent. */
  sizes: Record<ChunkSize, number | null>
  graph_enabled: boolean
  /** BCP-47; empty: detect per document. */
  language_hint: string
}

/** The draft of `kb`'s settings; the defaults of a new knowledge base without one. */
export function settingsDraft(kb?: KnowledgeBase | null): KnowledgeBaseSettingsDraft {
  const chunking = kb?.chunking
  const sizes = Object.fromEntries(CHUNK_SIZE_NAMES.map((name) => [name, chunking?.[name] || null]))
  return {
    embedding_model_id: kb?.embedding_model_id ?? '',
    strategy: chunking?.strategy ?? DEFAULT_CHUNKING_STRATEGY,
    sizes: sizes as Record<ChunkSize, number | null>,
    graph_enabled: kb?.graph_enabled ?? false,
    language_hint: kb?.language_hint ?? '',
  }
}

/** The chunking a draft asks for: its strategy and the sizes typed among those the strategy reads. */
export function chunkingBody(draft: Pick<KnowledgeBaseSettingsDraft, 'strategy' | 'sizes'>): ChunkingBody {
  const body: ChunkingBody = { strategy: draft.strategy }
  for (const name of CHUNK_SIZES[draft.strategy]) {
    const value = draft.sizes[name]
    if (value) body[name] = value // 0 means the default, like an empty field
  }
  return body
}

function sameChunking(a: ChunkingBody, b: ChunkingBody): boolean {
  return a.strategy === b.strategy && CHUNK_SIZE_NAMES.every((name) => a[name] === b[name])
}

/** A create request: name, description and language hint, and each advanced setting only when it
 * differs from what the server does without it. */
export function knowledgeBaseCreateBody(
  name: string,
  description: string,
  draft: KnowledgeBaseSettingsDraft,
): KnowledgeBaseCreate {
  const body: KnowledgeBaseCreate = {
    name: name.trim(),
    description: description.trim(),
    language_hint: draft.language_hint.trim(),
  }
  const model = draft.embedding_model_id.trim()
  if (model) body.embedding_model_id = model
  const chunking = chunkingBody(draft)
  if (!sameChunking(chunking, { strategy: DEFAULT_CHUNKING_STRATEGY })) body.chunking = chunking
  if (draft.graph_enabled) body.graph_enabled = true
  return body
}

/** A change request holding only what `draft` changes of `kb`; chunking, when changed, as a whole set. */
export function knowledgeBaseUpdateBody(kb: KnowledgeBase, draft: KnowledgeBaseSettingsDraft): KnowledgeBaseUpdate {
  const current = settingsDraft(kb)
  const body: KnowledgeBaseUpdate = {}
  const model = draft.embedding_model_id.trim()
  if (model && model !== current.embedding_model_id) body.embedding_model_id = model
  const chunking = chunkingBody(draft)
  if (!sameChunking(chunking, chunkingBody(current))) body.chunking = chunking
  if (draft.graph_enabled !== current.graph_enabled) body.graph_enabled = draft.graph_enabled
  const language = draft.language_hint.trim()
  if (language !== current.language_hint) body.language_hint = language
  return body
}
