/**
 * The retrieval-testing and evaluation pages rendered on the server side of Vue (no DOM) against a
 * fake gateway answering the bodies the API sends, in both languages, with no message key missing;
 * and what those pages compute: the search in the address, the comparison of two runs, a run
 * followed until it ends.
 */
import { setup as collectStyles } from '@css-render/vue3-ssr'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createSSRApp } from 'vue'
import { renderToString } from 'vue/server-renderer'
import { createMemoryHistory } from 'vue-router'

import App from '../src/App.vue'
import { session } from '../src/client'
import { i18n, LOCALES, type Locale } from '../src/i18n'
import { ApiClient, ApiError, sessionCredentials } from '../src/lib/api'
import { EvaluationApi, MAX_POLL_FAILURES, POLL_INTERVAL_MS, type EvaluationDetail } from '../src/lib/evaluationApi'
import { createAppRouter } from '../src/router'
import { comparisonOrder, formatDelta, metricDeltas, queryDiffs, relevantGrade, sortQueries } from '../src/views/evaluation/runs'
import { bodyFromForm, formFromQuery, queryFromForm } from '../src/views/evaluation/searchForm'
import { fakeFetch, jsonResponse, memoryStorage } from './fakeFetch'

// --- what the gateway answers --------------------------------------------------------------------

const KB = {
  id: 'kb1',
  name: 'Product handbook',
  description: '',
  embedding_model_id: 'bge-m3',
  graph_enabled: false,
  language_hint: 'en',
  document_count: 2,
  chunk_count: 40,
  size_bytes: 81920,
  create_time: '2025-05-01T08:00:00Z',
  update_time: '2025-05-02T08:00:00Z',
}

const SEARCH = {
  results: [
    {
      handle: 'h1',
      chunk_id: 'c-17',
      document_id: 'd-1',
      file_name: 'refund-policy.pdf',
      knowledge_base_id: 'kb1',
      score: 0.91234,
      scores: { vector: 0.8123, bm25: 12.5, rrf: 0.032522, rerank: 0.91234, vector_rank: 2, bm25_rank: 1 },
      text: 'Refunds are issued within 14 days of purchase. '.repeat(12),
      parent_id: 'p-3',
      parent_text: 'Section 4. Refunds. The whole section about refunds.',
      position: 17,
      heading_path: ['Billing', 'Refunds'],
      page: 4,
      metadata: {},
    },
    {
      handle: 'h2',
      chunk_id: 'c-40',
      document_id: 'd-2',
      file_name: 'faq.md',
      knowledge_base_id: 'kb1',
      score: 0.41,
      scores: { vector: 0.7001, bm25: null, rrf: 0.016129, rerank: 0.41, vector_rank: 1, bm25_rank: null },
      text: 'Can I get my money back? Yes, see the refund policy.',
      parent_id: '',
      parent_text: '',
      position: 3,
      heading_path: [],
      page: 0,
      metadata: {},
    },
  ],
  stats: {
    vector_hit_count: 20,
    bm25_hit_count: 7,
    expanded: false,
    expansion_queries: [],
    reranked: true,
    rerank_skipped_reason: '',
    mmr_applied: false,
    vector_weight_used: 1,
    bm25_weight_used: 0.5,
    embed_duration_seconds: 0.0123,
    total_duration_seconds: 0.0875,
    unknown_knowledge_base_ids: [],
    second_hop: false,
    second_hop_queries: [],
  },
}

const metrics = (ndcg: number, recall10: number) => ({
  ndcg_at_10: ndcg,
  recall_at_5: recall10 - 0.1,
  recall_at_10: recall10,
  recall_at_20: Math.min(1, recall10 + 0.05),
  mrr_at_10: ndcg + 0.02,
})

function run(id: string, fields: Partial<EvaluationDetail> = {}): EvaluationDetail {
  return {
    id,
    knowledge_base_id: 'kb1',
    name: '',
    status: 'completed',
    modes: ['hybrid', 'bm25'],
    created_at: '2025-05-03T09:00:00Z',
    finished_at: '2025-05-03T09:04:00Z',
    progress: { done: 3, total: 3 },
    error: null,
    metrics: {},
    ...fields,
  }
}

const RUN_A = run('ev-a', {
  name: 'Before chunking change',
  created_at: '2025-05-03T09:00:00Z',
  metrics: { hybrid: metrics(0.612, 0.7), bm25: metrics(0.5, 0.6) },
  queries: [
    {
      id: 'q1',
      text: 'How long do refunds take?',
      relevant: { 'refund-policy.pdf': 2 },
      results: { hybrid: { ndcg_at_10: 0.5, recall_at_10: 1, ranking: ['faq', 'refund-policy'] }, bm25: { ndcg_at_10: 1, recall_at_10: 1, ranking: ['refund-policy'] } },
    },
    {
      id: 'q2',
      text: 'Who do I call for SSO?',
      relevant: { 'security-faq': 1 },
      results: { hybrid: { ndcg_at_10: 0.8, recall_at_10: 1, ranking: ['security-faq'] }, bm25: { ndcg_at_10: 0, recall_at_10: 0, ranking: [] } },
    },
    {
      id: 'q3',
      text: 'Which plans exist?',
      relevant: { 'pricing.md': 1 },
      results: { hybrid: { ndcg_at_10: 0.3, recall_at_10: 1, ranking: ['faq', 'guide', 'pricing'] }, bm25: { ndcg_at_10: 0.3, recall_at_10: 1, ranking: ['pricing'] } },
    },
  ],
})

const RUN_B = run('ev-b', {
  name: 'After chunking change',
  created_at: '2025-05-04T09:00:00Z',
  metrics: { hybrid: metrics(0.734, 0.7), bm25: metrics(0.45, 0.6) },
  queries: [
    {
      id: 'q1',
      text: 'How long do refunds take?',
      relevant: { 'refund-policy.pdf': 2 },
      results: { hybrid: { ndcg_at_10: 1, recall_at_10: 1, ranking: ['refund-policy', 'faq'] }, bm25: { ndcg_at_10: 1, recall_at_10: 1, ranking: ['refund-policy'] } },
    },
    {
      id: 'q2',
      text: 'Who do I call for SSO?',
      relevant: { 'security-faq': 1, 'contacts.md': 1 },
      results: { hybrid: { ndcg_at_10: 0.6, recall_at_10: 0.5, ranking: ['security-faq', 'faq'] }, bm25: { ndcg_at_10: 0, recall_at_10: 0, ranking: [] } },
    },
    {
      id: 'q4',
      text: 'A new question',
      relevant: { 'faq.md': 1 },
      results: { hybrid: { ndcg_at_10: 1, recall_at_10: 1, ranking: ['faq'] }, bm25: { ndcg_at_10: 1, recall_at_10: 1, ranking: ['faq'] } },
    },
  ],
})

const RUNNING = run('ev-running', { name: 'Nightly', status: 'running', finished_at: null, progress: { done: 120, total: 400 } })
const FAILED = run('ev-failed', { name: 'Broken', status: 'failed', error: 'retrieval is not reachable', progress: { done: 3, total: 10 } })
const RUNS: Record<string, EvaluationDetail> = { 'ev-a': RUN_A, 'ev-b': RUN_B, 'ev-running': RUNNING, 'ev-failed': FAILED }

/** The gateway's answers by route; anything else an empty list. */
async function gateway(input: RequestInfo | URL, init: RequestInit = {}): Promise<Response> {
  const url = new URL(String(input), 'http://ui.test')
  const path = url.pathname
  const method = init.method ?? 'GET'
  if (method === 'POST' && path === '/api/v1/knowledge-bases/kb1/search') return jsonResponse(200, SEARCH)
  if (path === '/api/v1/knowledge-bases/kb1') return jsonResponse(200, KB)
  if (path === '/api/v1/knowledge-bases/kb1/evaluations') {
    const summaries = [RUNNING, RUN_B, RUN_A, FAILED].map(({ queries: _, ...summary }) => summary)
    return jsonResponse(200, { evaluations: summaries, next_page_token: '' })
  }
  const evaluation = /^\/api\/v1\/evaluations\/([^/]+)$/.exec(path)
  if (evaluation) {
    const found = RUNS[decodeURIComponent(evaluation[1])]
    return found ? jsonResponse(200, found) : jsonResponse(404, { error: { code: 'not_found', message: 'evaluation not found' } })
  }
  return jsonResponse(200, { sessions: [], knowledge_bases: [], documents: [], messages: [], next_page_token: '' })
}

// --- rendering ------------------------------------------------------------------------------------

const missing: string[] = []

beforeEach(() => {
  missing.length = 0
  i18n.global.setMissingHandler((locale, key) => {
    missing.push(`${locale}:${key}`)
    return key
  })
  vi.stubGlobal('fetch', gateway)
  session.credentials = { kind: 'local' }
})

afterEach(() => {
  vi.unstubAllGlobals()
  session.credentials = null
})

async function render(path: string, locale: Locale): Promise<string> {
  i18n.global.locale.value = locale
  const router = createAppRouter(createMemoryHistory('/ui/'))
  const app = createSSRApp(App).use(i18n).use(router)
  collectStyles(app)
  await router.push(path)
  await router.isReady()
  return renderToString(app)
}

/** The page's text without tags, spaces collapsed. */
function text(html: string): string {
  return html
    .replace(/<!--[\s\S]*?-->/g, '')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&amp;/g, '&')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/\s+/g, ' ')
}

describe('pages', () => {
  for (const locale of LOCALES) {
    it(`retrieval testing shows each result with its score parts and the search's stats (${locale})`, async () => {
      const html = await render('/knowledge/kb1/search?q=How+long+do+refunds+take%3F&top_k=5', locale)
      const page = text(html)
      expect(missing).toEqual([])
      expect(page).toContain('Product handbook')
      expect(html).toContain('id="search-query"')
      expect(html).toMatch(/<label[^>]*for="search-query"/)
      expect(page).toContain('refund-policy.pdf')
      expect(page).toContain('faq.md')
      expect(page).toContain('Billing')
      expect(page).toContain('0.9123') // the final score
      expect(page).toContain('12.5') // BM25
      expect(page).toContain('0.03252') // RRF
      expect(page).toContain(locale === 'zh' ? '未召回' : 'not recalled') // faq.md has no BM25 hit
      expect(page).toContain(locale === 'zh' ? '88 毫秒' : '88 ms') // total time
      // A long passage is cut with a button that opens it, a short one is whole.
      expect(page).not.toContain(SEARCH.results[0].text.trim())
      expect(html).toMatch(/aria-expanded="false"[^>]*aria-controls="passage-0"/)
      expect(page).toContain(SEARCH.results[1].text)
    })

    it(`retrieval testing without a question shows the form only (${locale})`, async () => {
      const html = await render('/knowledge/kb1/search', locale)
      expect(missing).toEqual([])
      expect(html).toContain('id="search-query"')
      expect(html).not.toContain('search-results-title')
    })

    it(`the evaluations list offers the start form, the runs and the comparison (${locale})`, async () => {
      const html = await render('/knowledge/kb1/evaluations', locale)
      const page = text(html)
      expect(missing).toEqual([])
      expect(page).toContain('Before chunking change')
      expect(page).toContain('Nightly')
      expect(html).toContain('href="/ui/evaluations/ev-b"')
      expect(html).toMatch(/type="checkbox"[^>]*aria-label="[^"]*After chunking change/)
      expect(html).toContain('id="eval-name"')
      expect(page).toContain(locale === 'zh' ? '比较选中的两次评测' : 'Compare the two selected')
      expect(page).toContain('0.734') // a summary's nDCG@10
    })

    it(`a completed run shows its measures as a table and a chart, and each question's ranking (${locale})`, async () => {
      const html = await render('/evaluations/ev-b', locale)
      const page = text(html)
      expect(missing).toEqual([])
      expect(page).toContain('After chunking change')
      expect(html).toMatch(/<th[^>]*scope="col"[^>]*>nDCG@10<\/th>/)
      expect(page).toContain('0.734')
      expect(html).toMatch(/<svg[^>]*role="img"[^>]*aria-labelledby="([^"]+)-title"[^>]*aria-describedby="\1-desc"/)
      expect(html).toMatch(/<desc[^>]*>[^<]*nDCG@10 0\.734, Recall@10 0\.700/)
      expect(page).toContain('How long do refunds take?')
      expect(html).toContain('aria-sort="none"')
      // refund-policy is relevant (grade 2); contacts.md was missed in hybrid.
      expect(page).toContain(locale === 'zh' ? '相关，相关度 2' : 'relevant, grade 2')
      expect(page).toContain('contacts.md')
    })

    it(`a running run shows its progress; a failed one its reason (${locale})`, async () => {
      const running = text(await render('/evaluations/ev-running', locale))
      expect(running).toContain(locale === 'zh' ? '已评测 120 / 400 个问题' : '120 of 400 questions evaluated')
      const failed = text(await render('/evaluations/ev-failed', locale))
      expect(failed).toContain('retrieval is not reachable')
      expect(missing).toEqual([])
    })

    it(`the comparison shows signed changes per mode and the questions that changed (${locale})`, async () => {
      const html = await render('/evaluations/compare?a=ev-a&b=ev-b', locale)
      const page = text(html)
      expect(missing).toEqual([])
      expect(page).toContain('Before chunking change')
      expect(page).toContain('After chunking change')
      expect(html).toMatch(/class="delta delta-better"[^>]*>\+0\.122</) // hybrid nDCG@10
      expect(html).toMatch(/class="delta delta-worse"[^>]*>−0\.050</) // bm25 nDCG@10
      expect(html).toMatch(/class="delta delta-same"[^>]*>±0\.000</) // recall unchanged
      expect(page).toContain(locale === 'zh' ? '变好 1 个，变差 1 个，不变 0 个。' : '1 better, 1 worse, 0 unchanged.')
      expect(page).toContain('Who do I call for SSO?')
    })

    it(`the comparison without two runs says how to pick them (${locale})`, async () => {
      const page = text(await render('/evaluations/compare', locale))
      expect(missing).toEqual([])
      expect(page).toContain(locale === 'zh' ? '请在知识库的评测页面选择两次评测' : 'Choose two runs on a knowledge base’s evaluations page')
    })

    it(`the knowledge base links to retrieval testing and its evaluations (${locale})`, async () => {
      const html = await render('/knowledge/kb1', locale)
      expect(missing).toEqual([])
      expect(html).toContain('href="/ui/knowledge/kb1/search"')
      expect(html).toContain('href="/ui/knowledge/kb1/evaluations"')
    })

    it(`the chat offers a named button to attach images (${locale})`, async () => {
      const html = await render('/chat', locale)
      expect(missing).toEqual([])
      expect(html).toMatch(new RegExp(`<button[^>]*id="chat-attach"[\\s\\S]*?${locale === 'zh' ? '添加图片' : 'Attach images'}`))
      expect(html).toMatch(/type="file"[^>]*accept="image\/png,image\/jpeg,image\/webp,image\/gif"/)
    })
  }
})

// --- what the pages compute ----------------------------------------------------------------------

describe('the search in the address', () => {
  it('goes there and back with every option, and into the body only what is set', () => {
    const form = formFromQuery({})
    Object.assign(form, { query: ' refunds ', mode: 'bm25', top_k: 5, mmr_lambda: 0.5, rerank: 'off', document_ids: ['d-1'] })
    const query = queryFromForm(form)
    expect(query).toEqual({ q: 'refunds', mode: 'bm25', top_k: '5', mmr_lambda: '0.5', rerank: 'off', doc: ['d-1'] })
    expect(bodyFromForm(formFromQuery(query as Record<string, string>))).toEqual({
      query: 'refunds',
      mode: 'bm25',
      top_k: 5,
      mmr_lambda: 0.5,
      rerank: false,
      document_ids: ['d-1'],
    })
  })

  it('drops values out of range instead of sending them', () => {
    const form = formFromQuery({ q: 'x', mode: 'fuzzy', top_k: '500', rrf_k: '0', mmr_lambda: '1.5', vector_weight: '-1', expansion: 'maybe' })
    expect(bodyFromForm(form)).toEqual({ query: 'x', mode: 'hybrid' })
  })
})

describe('comparing runs', () => {
  it('puts the earlier run first', () => {
    expect(comparisonOrder([RUN_B, RUN_A])).toEqual({ a: 'ev-a', b: 'ev-b' })
    expect(comparisonOrder([RUN_A])).toBeNull()
  })

  it('gives each measure of each common mode as b − a', () => {
    const [hybrid, bm25] = metricDeltas(RUN_A, RUN_B)
    expect(hybrid.mode).toBe('hybrid')
    expect(hybrid.deltas[0]).toMatchObject({ metric: 'ndcg_at_10', a: 0.612, b: 0.734 })
    expect(hybrid.deltas[0].delta).toBeCloseTo(0.122)
    expect(bm25.deltas[0].delta).toBeCloseTo(-0.05)
  })

  it('lists the questions that got better and worse, matched by id', () => {
    const diffs = queryDiffs(RUN_A, RUN_B, 'hybrid')
    expect(diffs.better.map((d) => d.id)).toEqual(['q1'])
    expect(diffs.worse.map((d) => d.id)).toEqual(['q2'])
    expect(diffs).toMatchObject({ same: 0, onlyA: 1, onlyB: 1 })
    expect(queryDiffs(RUN_A, RUN_B, 'bm25')).toMatchObject({ better: [], worse: [], same: 2 })
  })

  it('writes every change with its sign', () => {
    expect(formatDelta(0.1224, 'en')).toBe('+0.122')
    expect(formatDelta(-0.05, 'en')).toBe('−0.050')
    expect(formatDelta(0.0001, 'en')).toBe('±0.000')
  })
})

describe('a run’s questions', () => {
  it('mark a ranked document relevant by its label, with or without the extension', () => {
    expect(relevantGrade('refund-policy', { 'refund-policy.pdf': 2 })).toBe(2)
    expect(relevantGrade('security-faq', { 'security-faq': 1 })).toBe(1)
    expect(relevantGrade('faq', { 'refund-policy.pdf': 2 })).toBeNull()
  })

  it('sort by nDCG in a mode, either way', () => {
    const queries = RUN_A.queries!
    expect(sortQueries(queries, { by: 'ndcg', mode: 'hybrid', descending: false }).map((q) => q.id)).toEqual(['q3', 'q1', 'q2'])
    expect(sortQueries(queries, { by: 'ndcg', mode: 'hybrid', descending: true }).map((q) => q.id)).toEqual(['q2', 'q1', 'q3'])
    expect(sortQueries(queries, { by: 'order' })).toBe(queries)
  })
})

describe('following a run', () => {
  function client(...answers: Parameters<typeof fakeFetch>) {
    const fake = fakeFetch(...answers)
    return { evaluations: new EvaluationApi(new ApiClient({ fetch: fake.fetch, credentials: sessionCredentials(memoryStorage()) })), requests: fake.requests }
  }

  it('reads it every two seconds until it has ended, riding out a dropped connection', async () => {
    const { evaluations, requests } = client(
      () => jsonResponse(200, RUNNING),
      () => Promise.reject(new TypeError('Failed to fetch')),
      () => jsonResponse(200, { ...RUNNING, progress: { done: 400, total: 400 } }),
      () => jsonResponse(200, RUN_B),
    )
    const seen: string[] = []
    const pauses: number[] = []
    await evaluations.watch('ev-running', (r) => seen.push(`${r.status} ${r.progress.done}`), new AbortController().signal, async (ms) => {
      pauses.push(ms)
    })
    expect(seen).toEqual(['running 120', 'running 400', 'completed 3'])
    expect(pauses).toEqual([POLL_INTERVAL_MS, POLL_INTERVAL_MS, POLL_INTERVAL_MS])
    expect(requests.map((r) => r.url)).toEqual(Array(4).fill('/api/v1/evaluations/ev-running'))
  })

  it('stops when the page closes, and on a refusal or too many failures in a row', async () => {
    const controller = new AbortController()
    const { evaluations } = client(() => jsonResponse(200, RUNNING))
    const seen: unknown[] = []
    await evaluations.watch('ev-running', (r) => seen.push(r), controller.signal, async () => controller.abort())
    expect(seen).toHaveLength(1)

    const refused = client(() => jsonResponse(404, { error: { code: 'not_found', message: 'evaluation not found' } }))
    await expect(refused.evaluations.watch('gone', () => {}, new AbortController().signal, async () => {})).rejects.toThrow('evaluation not found')

    const down = client(...Array.from({ length: MAX_POLL_FAILURES }, () => () => jsonResponse(503, { error: { code: 'unavailable', message: 'down' } })))
    await expect(down.evaluations.watch('ev', () => {}, new AbortController().signal, async () => {})).rejects.toBeInstanceOf(ApiError)
    expect(down.requests).toHaveLength(MAX_POLL_FAILURES)
  })

  it('starts a run with the labelled questions and the chosen modes', async () => {
    const { evaluations, requests } = client(() => jsonResponse(202, RUNNING))
    const started = await evaluations.start('kb1', { name: 'Nightly', modes: ['hybrid'], queries: [{ id: 'q1', text: 'x', relevant: { d: 1 } }] })
    expect(started.status).toBe('running')
    expect(requests[0]).toMatchObject({ method: 'POST', url: '/api/v1/knowledge-bases/kb1/evaluations' })
    expect(JSON.parse(requests[0].body as string)).toEqual({ name: 'Nightly', modes: ['hybrid'], queries: [{ id: 'q1', text: 'x', relevant: { d: 1 } }] })
  })
})
