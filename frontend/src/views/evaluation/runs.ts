/** What the evaluation pages show of runs: measures as numbers people read, which hits were relevant,
 * queries in order, and the differences between two runs. Pure functions of the API's JSON. */

import {
  METRICS,
  SEARCH_MODES,
  type EvaluationDetail,
  type MetricName,
  type QueryOutcome,
  type SearchMode,
} from '../../lib/evaluationApi'

/** The measures' usual names, the same in every language. */
export const METRIC_LABELS: Record<MetricName, string> = {
  ndcg_at_10: 'nDCG@10',
  recall_at_5: 'Recall@5',
  recall_at_10: 'Recall@10',
  recall_at_20: 'Recall@20',
  mrr_at_10: 'MRR@10',
}

/** The measures the chart shows. */
export const CHART_METRICS: readonly MetricName[] = ['ndcg_at_10', 'recall_at_10']

/** A change smaller than this is no change (the measures are means of three-decimal numbers). */
export const SAME_WITHIN = 0.0005

/** A measure in [0, 1] with three decimals: `0.734`. */
export function formatMetric(value: number | null | undefined, locale: string): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '—'
  return new Intl.NumberFormat(locale, { minimumFractionDigits: 3, maximumFractionDigits: 3 }).format(value)
}

/** A difference, always signed so that the sign says what the colour says: `+0.034`, `−0.012`, `±0.000`. */
export function formatDelta(value: number, locale: string): string {
  if (Math.abs(value) < SAME_WITHIN) return `±${formatMetric(0, locale)}`
  const text = formatMetric(Math.abs(value), locale)
  return value > 0 ? `+${text}` : `−${text}`
}

export function deltaKind(value: number): 'better' | 'worse' | 'same' {
  return Math.abs(value) < SAME_WITHIN ? 'same' : value > 0 ? 'better' : 'worse'
}

/** The modes of a run in the product's order. */
export function runModes(run: Pick<EvaluationDetail, 'modes' | 'metrics'>): SearchMode[] {
  const named = new Set([...(run.modes ?? []), ...(Object.keys(run.metrics ?? {}) as SearchMode[])])
  return SEARCH_MODES.filter((mode) => named.has(mode))
}

function stem(label: string): string {
  const dot = label.lastIndexOf('.')
  return dot > 0 ? label.slice(0, dot) : label
}

/**
 * The grade of a ranked document, null when no label of the query names it. The ranking names each
 * document by its file name without the extension, a label may carry the extension (`guide.pdf`).
 */
export function relevantGrade(ranked: string, relevant: Record<string, number>): number | null {
  if (ranked in relevant) return relevant[ranked]
  for (const [label, grade] of Object.entries(relevant)) if (stem(label) === ranked) return grade
  return null
}

/** The relevant labels of a query that its ranking in one mode does not hold. */
export function missedLabels(ranking: string[], relevant: Record<string, number>): string[] {
  const found = new Set(ranking)
  return Object.keys(relevant).filter((label) => !found.has(label) && !found.has(stem(label)))
}

export type QuerySort = { by: 'order' } | { by: 'ndcg'; mode: SearchMode; descending: boolean }

/** The queries in the order asked for; a query without a result in that mode goes last. */
export function sortQueries(queries: QueryOutcome[], sort: QuerySort): QueryOutcome[] {
  if (sort.by === 'order') return queries
  const value = (q: QueryOutcome) => q.results?.[sort.mode]?.ndcg_at_10
  return [...queries].sort((x, y) => {
    const a = value(x)
    const b = value(y)
    if (a === undefined || b === undefined) return (a === undefined ? 1 : 0) - (b === undefined ? 1 : 0)
    return sort.descending ? b - a : a - b
  })
}

export interface MetricDelta {
  metric: MetricName
  a: number
  b: number
  delta: number
}

/** Per mode both runs measured, each measure of `a` and `b` and `b − a`. */
export function metricDeltas(a: EvaluationDetail, b: EvaluationDetail): { mode: SearchMode; deltas: MetricDelta[] }[] {
  return commonModes(a, b).map((mode) => ({
    mode,
    deltas: METRICS.filter((metric) => typeof a.metrics?.[mode]?.[metric] === 'number' && typeof b.metrics?.[mode]?.[metric] === 'number').map(
      (metric) => {
        const va = a.metrics![mode]![metric]
        const vb = b.metrics![mode]![metric]
        return { metric, a: va, b: vb, delta: vb - va }
      },
    ),
  }))
}

/** The modes both runs have measures for. */
export function commonModes(a: EvaluationDetail, b: EvaluationDetail): SearchMode[] {
  return SEARCH_MODES.filter((mode) => a.metrics?.[mode] && b.metrics?.[mode])
}

export interface QueryDelta {
  id: string
  text: string
  a: number
  b: number
  delta: number
}

export interface QueryDiffs {
  better: QueryDelta[]
  worse: QueryDelta[]
  same: number
  /** Queries only one of the runs asked (by id). */
  onlyA: number
  onlyB: number
}

/** How each query both runs asked (matched by id) changed in nDCG@10 in `mode`, largest changes first. */
export function queryDiffs(a: EvaluationDetail, b: EvaluationDetail, mode: SearchMode): QueryDiffs {
  const inA = new Map((a.queries ?? []).map((q) => [q.id, q]))
  const inB = new Map((b.queries ?? []).map((q) => [q.id, q]))
  const out: QueryDiffs = { better: [], worse: [], same: 0, onlyA: 0, onlyB: 0 }
  const score = (q: QueryOutcome | undefined) => q?.results?.[mode]?.ndcg_at_10
  for (const [id, qa] of inA) {
    const va = score(qa)
    if (va === undefined) continue
    const qb = inB.get(id)
    const vb = score(qb)
    if (vb === undefined) {
      out.onlyA += 1
      continue
    }
    const entry = { id, text: qa.text || qb!.text, a: va, b: vb, delta: vb - va }
    const kind = deltaKind(entry.delta)
    if (kind === 'better') out.better.push(entry)
    else if (kind === 'worse') out.worse.push(entry)
    else out.same += 1
  }
  for (const [id, qb] of inB) if (score(qb) !== undefined && score(inA.get(id)) === undefined) out.onlyB += 1
  out.better.sort((x, y) => y.delta - x.delta)
  out.worse.sort((x, y) => x.delta - y.delta)
  return out
}

/** A time as people read it in the UI's language; empty when there is none. */
export function formatTime(iso: string | null | undefined, locale: string): string {
  if (!iso) return ''
  const time = new Date(iso)
  if (Number.isNaN(time.getTime())) return ''
  return new Intl.DateTimeFormat(locale, { dateStyle: 'medium', timeStyle: 'short' }).format(time)
}

/** Two runs to compare in the order of the comparison: the earlier one as a, the later as b. */
export function comparisonOrder<R extends { id: string; created_at: string }>(runs: R[]): { a: string; b: string } | null {
  if (runs.length !== 2) return null
  const [x, y] = [...runs].sort((p, q) => (p.created_at ?? '').localeCompare(q.created_at ?? ''))
  return { a: x.id, b: y.id }
}

/** Items joined the way the UI's language joins a list: `Hybrid, Vector and BM25`, `混合、向量和BM25`. */
export function formatList(items: string[], locale: string): string {
  return new Intl.ListFormat(locale, { style: 'long', type: 'conjunction' }).format(items)
}

/** A run status's tag colours, each text at least 4.5:1 on its background (the status is also written). */
export const STATUS_COLOURS: Record<string, { color: string; textColor: string; borderColor: string }> = {
  running: { color: '#e8f0fe', textColor: '#0b57d0', borderColor: '#e8f0fe' },
  completed: { color: '#e3f1ec', textColor: '#1a5e3f', borderColor: '#e3f1ec' },
  failed: { color: '#fdecea', textColor: '#b3261e', borderColor: '#fdecea' },
}
