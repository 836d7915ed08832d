/**
 * The calls of the retrieval-testing and evaluation pages, on the app's {@link ApiClient}, and the
 * JSON they answer:
 *
 * - `POST /api/v1/knowledge-bases/{kb_id}/search` (services/gateway/…/api/search.py): retrieval's
 *   `SearchResponse` as protojson — proto field names, an unset `optional` score as null, a Duration
 *   as `<name>_seconds`;
 * - the evaluation runs of a knowledge base: started with labelled queries, run by the server in the
 *   background for each search mode, read back with their metrics and per-query rankings.
 */

import { API_BASE, ApiError, sleep, type ApiClient } from './api'

// --- retrieval testing ---------------------------------------------------------------------------

export type SearchMode = 'hybrid' | 'vector' | 'bm25'
export const SEARCH_MODES: readonly SearchMode[] = ['hybrid', 'vector', 'bm25']

/** The longest query the search route takes (`MAX_QUERY_CHARS` of api/search.py). */
export const MAX_QUERY_CHARS = 4000
/** The most results one search returns (`MAX_TOP_K` of api/search.py). */
export const MAX_TOP_K = 100

/** The body of the search route; an option left out takes the knowledge base's setting. */
export interface SearchBody {
  query: string
  /** 0 or absent: the server's default. */
  top_k?: number
  mode?: SearchMode
  document_ids?: string[]
  rrf_k?: number
  vector_weight?: number
  bm25_weight?: number
  rerank?: boolean
  /** In [0, 1], 1 = relevance only; absent: no MMR. */
  mmr_lambda?: number
  expansion?: boolean
}

/** A result's score parts; a leg that did not recall the chunk has null there. */
export interface ScoreParts {
  vector: number | null
  bm25: number | null
  rrf: number
  rerank: number | null
  vector_rank: number | null
  bm25_rank: number | null
}

export interface SearchResult {
  handle: string
  chunk_id: string
  document_id: string
  file_name: string
  knowledge_base_id: string
  /** What the results are ordered by: rerank, else MMR-adjusted RRF. */
  score: number
  scores: ScoreParts | null
  text: string
  parent_id: string
  /** Only on the highest-ranked result of several sharing a parent. */
  parent_text: string
  position: number
  heading_path: string[]
  /** 1-based; 0 when none. */
  page: number
  metadata: Record<string, string>
}

export interface SearchStats {
  vector_hit_count: number
  bm25_hit_count: number
  expanded: boolean
  expansion_queries: string[]
  reranked: boolean
  rerank_skipped_reason: string
  mmr_applied: boolean
  vector_weight_used: number
  bm25_weight_used: number
  embed_duration_seconds: number | null
  total_duration_seconds: number | null
  unknown_knowledge_base_ids: string[]
  second_hop: boolean
  second_hop_queries: string[]
}

export interface SearchResponse {
  results: SearchResult[]
  stats: SearchStats | null
}

// --- evaluations ---------------------------------------------------------------------------------

export type EvaluationStatus = 'running' | 'completed' | 'failed'

/** The measures of a run, each a mean over its queries in [0, 1]. */
export type MetricName = 'ndcg_at_10' | 'recall_at_5' | 'recall_at_10' | 'recall_at_20' | 'mrr_at_10'
export const METRICS: readonly MetricName[] = ['ndcg_at_10', 'recall_at_5', 'recall_at_10', 'recall_at_20', 'mrr_at_10']
export type Metrics = Record<MetricName, number>

/** The server's limits on a run's queries. */
export const EVALUATION_LIMITS = {
  maxQueries: 2000,
  maxQueryIdChars: 200,
  maxLabelsPerQuery: 100,
  minGrade: 0,
  maxGrade: 100,
} as const

/** A labelled query: a label names a relevant document by id, file name, or file name without extension. */
export interface EvaluationQuery {
  id: string
  text: string
  /** Label → graded relevance (higher is more relevant). */
  relevant: Record<string, number>
}

export interface EvaluationCreate {
  name?: string
  /** Absent: every mode. */
  modes?: SearchMode[]
  queries: EvaluationQuery[]
}

export interface EvaluationRun {
  id: string
  knowledge_base_id: string
  name: string
  status: EvaluationStatus
  modes: SearchMode[]
  created_at: string
  finished_at?: string | null
  progress: { done: number; total: number }
  /** Why the run failed; null unless it failed. */
  error?: string | null
  /** Per mode, each measure averaged over the run's questions; empty until the run has completed. */
  metrics?: Partial<Record<SearchMode, Metrics>>
}

/** How one query did in one mode: its measures and the first documents found, best first, each as its
 * file name without the extension (its document id when it has none). */
export interface QueryModeResult extends Partial<Metrics> {
  ndcg_at_10: number
  recall_at_10: number
  ranking: string[]
}

export interface QueryOutcome extends EvaluationQuery {
  results: Partial<Record<SearchMode, QueryModeResult>>
}

/** A run read by id: with its questions, in the order they were given. */
export interface EvaluationDetail extends EvaluationRun {
  queries?: QueryOutcome[]
}

export interface EvaluationPage {
  evaluations: EvaluationRun[]
  next_page_token: string
}

/** How often a running run is read again. */
export const POLL_INTERVAL_MS = 2000
/** Readings in a row that may fail for want of an answer (a dropped connection, a restarting
 * gateway) before watching a run gives up. */
export const MAX_POLL_FAILURES = 5

export class EvaluationApi {
  constructor(private readonly client: ApiClient) {}

  /** Searches one knowledge base with the testing page's options (the route of {@link ApiClient.search}). */
  async search(kbId: string, body: SearchBody, signal?: AbortSignal): Promise<SearchResponse> {
    return (await this.client.search(kbId, body, signal)) as SearchResponse
  }

  /** Starts a run (the server answers 202 with it running). */
  start(kbId: string, body: EvaluationCreate): Promise<EvaluationRun> {
    return this.client.json('POST', `${API_BASE}/knowledge-bases/${enc(kbId)}/evaluations`, { json: body })
  }

  /** One page of a knowledge base's runs, newest first. */
  list(kbId: string, pageToken = '', signal?: AbortSignal): Promise<EvaluationPage> {
    return this.client.json('GET', `${API_BASE}/knowledge-bases/${enc(kbId)}/evaluations`, {
      query: { page_token: pageToken || undefined },
      signal,
    })
  }

  get(id: string, signal?: AbortSignal): Promise<EvaluationDetail> {
    return this.client.json('GET', `${API_BASE}/evaluations/${enc(id)}`, { signal })
  }

  delete(id: string): Promise<void> {
    return this.client.json('DELETE', `${API_BASE}/evaluations/${enc(id)}`)
  }

  /**
   * Reads a run every {@link POLL_INTERVAL_MS} while it is running, handing each reading to `onRun`,
   * until it has finished or `signal` aborts. A reading that got no answer or a busy server's is
   * tried again at the next interval, up to {@link MAX_POLL_FAILURES} in a row; any other failure
   * ends the watch with its error.
   */
  async watch(
    id: string,
    onRun: (run: EvaluationDetail) => void,
    signal: AbortSignal,
    pause: (ms: number, signal: AbortSignal) => Promise<void> = sleep,
  ): Promise<void> {
    let failures = 0
    while (!signal.aborted) {
      try {
        const run = await this.get(id, signal)
        if (signal.aborted) return
        failures = 0
        onRun(run)
        if (run.status !== 'running') return
      } catch (error) {
        if (signal.aborted) return
        failures += 1
        if (!(error instanceof ApiError && error.retryable) || failures >= MAX_POLL_FAILURES) throw error
      }
      await pause(POLL_INTERVAL_MS, signal)
    }
  }
}

function enc(id: string): string {
  return encodeURIComponent(id)
}
