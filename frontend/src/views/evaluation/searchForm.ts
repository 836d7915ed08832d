/**
 * The retrieval-testing form, and the same form in the page's address (`?q=…&mode=bm25&top_k=5`): a
 * search can be linked to, reloaded, and gone back to. A value out of range in the address is dropped,
 * so the search takes the knowledge base's setting for it instead.
 */

import type { LocationQuery, LocationQueryRaw } from 'vue-router'

import { MAX_QUERY_CHARS, MAX_TOP_K, SEARCH_MODES, type SearchBody, type SearchMode } from '../../lib/evaluationApi'

/** A switch the search may leave to the knowledge base's setting. */
export type Toggle = '' | 'on' | 'off'

export interface SearchForm {
  query: string
  mode: SearchMode
  /** null: each one the knowledge base's setting. */
  top_k: number | null
  rrf_k: number | null
  vector_weight: number | null
  bm25_weight: number | null
  mmr_lambda: number | null
  rerank: Toggle
  expansion: Toggle
  document_ids: string[]
}

/** The largest RRF constant the route takes (an int32). */
export const MAX_RRF_K = 2 ** 31 - 1

export function emptyForm(): SearchForm {
  return {
    query: '',
    mode: 'hybrid',
    top_k: null,
    rrf_k: null,
    vector_weight: null,
    bm25_weight: null,
    mmr_lambda: null,
    rerank: '',
    expansion: '',
    document_ids: [],
  }
}

function first(value: LocationQuery[string] | undefined): string {
  const item = Array.isArray(value) ? value[0] : value
  return typeof item === 'string' ? item : ''
}

function number(value: string, min: number, max: number, integer: boolean): number | null {
  if (value.trim() === '') return null
  const parsed = Number(value)
  if (!Number.isFinite(parsed) || parsed < min || parsed > max || (integer && !Number.isInteger(parsed))) return null
  return parsed
}

function toggle(value: string): Toggle {
  return value === 'on' || value === 'off' ? value : ''
}

/** The form an address holds. */
export function formFromQuery(query: LocationQuery): SearchForm {
  const mode = first(query.mode)
  const docs = query.doc
  return {
    query: first(query.q).slice(0, MAX_QUERY_CHARS),
    mode: (SEARCH_MODES as readonly string[]).includes(mode) ? (mode as SearchMode) : 'hybrid',
    top_k: number(first(query.top_k), 1, MAX_TOP_K, true),
    rrf_k: number(first(query.rrf_k), 1, MAX_RRF_K, true),
    vector_weight: number(first(query.vector_weight), 0, Number.MAX_VALUE, false),
    bm25_weight: number(first(query.bm25_weight), 0, Number.MAX_VALUE, false),
    mmr_lambda: number(first(query.mmr_lambda), 0, 1, false),
    rerank: toggle(first(query.rerank)),
    expansion: toggle(first(query.expansion)),
    document_ids: (Array.isArray(docs) ? docs : [docs]).filter((d): d is string => typeof d === 'string' && d !== ''),
  }
}

/** The address of a form: only what differs from the defaults. */
export function queryFromForm(form: SearchForm): LocationQueryRaw {
  const query: LocationQueryRaw = { q: form.query.trim() }
  if (form.mode !== 'hybrid') query.mode = form.mode
  for (const key of ['top_k', 'rrf_k', 'vector_weight', 'bm25_weight', 'mmr_lambda'] as const) {
    if (form[key] !== null) query[key] = String(form[key])
  }
  if (form.rerank) query.rerank = form.rerank
  if (form.expansion) query.expansion = form.expansion
  if (form.document_ids.length) query.doc = [...form.document_ids]
  return query
}

/** The search route's body of a form: what is not set is left out. */
export function bodyFromForm(form: SearchForm): SearchBody {
  const body: SearchBody = { query: form.query.trim(), mode: form.mode }
  if (form.top_k !== null) body.top_k = form.top_k
  if (form.rrf_k !== null) body.rrf_k = form.rrf_k
  if (form.vector_weight !== null) body.vector_weight = form.vector_weight
  if (form.bm25_weight !== null) body.bm25_weight = form.bm25_weight
  if (form.mmr_lambda !== null) body.mmr_lambda = form.mmr_lambda
  if (form.rerank) body.rerank = form.rerank === 'on'
  if (form.expansion) body.expansion = form.expansion === 'on'
  if (form.document_ids.length) body.document_ids = [...form.document_ids]
  return body
}

/** Whether two addresses hold the same search. */
export function sameSearch(a: LocationQuery | LocationQueryRaw, b: LocationQuery | LocationQueryRaw): boolean {
  return JSON.stringify(bodyFromForm(formFromQuery(a as LocationQuery))) === JSON.stringify(bodyFromForm(formFromQuery(b as LocationQuery)))
}
