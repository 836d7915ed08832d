/**
 * A knowledge base's configuration: the create request holds the advanced settings only when they are
 * set (and only the sizes of the chosen strategy), a change request only what changed, and the
 * settings panel renders in both languages (Vue's server renderer, no DOM) against a fake gateway
 * answering hand-written bodies shaped like api/knowledge.py's and api/models.py's: the configuration,
 * a running, failed or finished migration, every control labelled.
 */
import { setup as collectStyles } from '@css-render/vue3-ssr'
import { NMessageProvider } from 'naive-ui'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createSSRApp, h } from 'vue'
import { renderToString } from 'vue/server-renderer'
import { createMemoryHistory } from 'vue-router'

import App from '../src/App.vue'
import KnowledgeBaseSettings from '../src/components/KnowledgeBaseSettings.vue'
import { session } from '../src/client'
import { i18n, LOCALES, type Locale } from '../src/i18n'
import {
  ApiClient,
  knowledgeBaseCreateBody,
  knowledgeBaseUpdateBody,
  sessionCredentials,
  settingsDraft,
  type EmbeddingMigration,
  type KnowledgeBase,
} from '../src/lib/api'
import { createAppRouter } from '../src/router'
import { fakeFetch, jsonResponse, memoryStorage } from './fakeFetch'

const TIME = '2025-03-01T09:30:00Z'

const kb: KnowledgeBase = {
  id: 'kb1',
  name: 'Handbook',
  description: '',
  embedding_model_id: 'm-bge',
  embedding_dimension: 1024,
  chunking: {
    strategy: 'heading',
    chunk_size_tokens: 512,
    chunk_overlap_tokens: 0,
    parent_size_tokens: 0,
    child_size_tokens: 0,
  },
  graph_enabled: false,
  language_hint: 'en',
  document_count: 10,
  chunk_count: 420,
  size_bytes: 2_000_000,
  migration: null,
  create_time: TIME,
  update_time: TIME,
}

function embeddingModel(id: string, displayName: string, modelName: string, defaultFor: string[] = []) {
  return {
    id,
    display_name: displayName,
    provider_id: 'local',
    model_name: modelName,
    types: ['embedding'],
    base_url: '',
    parameters: null,
    api_key_hint: '',
    builtin: true,
    tenant_id: '',
    default_for: defaultFor,
    create_time: TIME,
    update_time: TIME,
    description: '',
  }
}

const MODELS = [
  embeddingModel('m-bge', 'Multilingual BGE', 'BAAI/bge-m3', ['embedding']),
  embeddingModel('m-e5', 'E5 large', 'intfloat/e5-large'),
]

describe('the create request', () => {
  it('holds no advanced setting when none is set', () => {
    expect(knowledgeBaseCreateBody(' Handbook ', ' HR rules ', settingsDraft())).toEqual({
      name: 'Handbook',
      description: 'HR rules',
      language_hint: '',
    })
  })

  it('holds the embedding model, graph extraction and chunking once they are set', () => {
    const draft = { ...settingsDraft(), embedding_model_id: 'm-e5', graph_enabled: true, language_hint: 'de' }
    draft.sizes.chunk_size_tokens = 400
    expect(knowledgeBaseCreateBody('Handbook', '', draft)).toEqual({
      name: 'Handbook',
      description: '',
      language_hint: 'de',
      embedding_model_id: 'm-e5',
      chunking: { strategy: 'heading', chunk_size_tokens: 400 },
      graph_enabled: true,
    })
  })

  it('sends only the sizes the chosen strategy uses', () => {
    const draft = settingsDraft()
    draft.sizes = { chunk_size_tokens: 400, chunk_overlap_tokens: 40, parent_size_tokens: 1200, child_size_tokens: 200 }
    expect(knowledgeBaseCreateBody('a', '', draft).chunking).toEqual({
      strategy: 'heading',
      chunk_size_tokens: 400,
      chunk_overlap_tokens: 40,
    })
    draft.strategy = 'parent_child'
    expect(knowledgeBaseCreateBody('a', '', draft).chunking).toEqual({
      strategy: 'parent_child',
      parent_size_tokens: 1200,
      child_size_tokens: 200,
      chunk_overlap_tokens: 40,
    })
  })

  it('names a strategy other than the default even without sizes, and leaves empty sizes to the server', () => {
    const draft = { ...settingsDraft(), strategy: 'parent_child' as const }
    draft.sizes.child_size_tokens = null
    expect(knowledgeBaseCreateBody('a', '', draft).chunking).toEqual({ strategy: 'parent_child' })
  })
})

describe('the change request', () => {
  it('is empty when nothing changed', () => {
    expect(knowledgeBaseUpdateBody(kb, settingsDraft(kb))).toEqual({})
  })

  it('holds only the fields that changed', () => {
    const draft = { ...settingsDraft(kb), graph_enabled: true, language_hint: ' zh ' }
    expect(knowledgeBaseUpdateBody(kb, draft)).toEqual({ graph_enabled: true, language_hint: 'zh' })
    expect(knowledgeBaseUpdateBody(kb, { ...settingsDraft(kb), embedding_model_id: 'm-e5' })).toEqual({
      embedding_model_id: 'm-e5',
    })
  })

  it('sends changed chunking as the whole set it replaces, with the strategy sizes only', () => {
    const draft = settingsDraft(kb)
    draft.sizes.chunk_overlap_tokens = 64
    expect(knowledgeBaseUpdateBody(kb, draft)).toEqual({
      chunking: { strategy: 'heading', chunk_size_tokens: 512, chunk_overlap_tokens: 64 },
    })
    draft.strategy = 'parent_child'
    draft.sizes.child_size_tokens = 256
    expect(knowledgeBaseUpdateBody(kb, draft)).toEqual({
      chunking: { strategy: 'parent_child', child_size_tokens: 256, chunk_overlap_tokens: 64 },
    })
  })

  it('does not count a size the strategy ignores as a change', () => {
    const draft = settingsDraft(kb)
    draft.sizes.parent_size_tokens = 2000
    expect(knowledgeBaseUpdateBody(kb, draft)).toEqual({})
  })

  it('goes out as a PATCH of the knowledge base with that body alone', async () => {
    const fake = fakeFetch(() => jsonResponse(200, { ...kb, graph_enabled: true }))
    const api = new ApiClient({ fetch: fake.fetch, credentials: sessionCredentials(memoryStorage()) })
    const updated = await api.updateKnowledgeBase('kb1', knowledgeBaseUpdateBody(kb, { ...settingsDraft(kb), graph_enabled: true }))
    expect(updated.graph_enabled).toBe(true)
    expect(fake.requests[0].method).toBe('PATCH')
    expect(fake.requests[0].url).toBe('/api/v1/knowledge-bases/kb1')
    expect(JSON.parse(String(fake.requests[0].body))).toEqual({ graph_enabled: true })
  })
})

// --- rendered ----------------------------------------------------------------------------------------

const missing: string[] = []

beforeEach(() => {
  missing.length = 0
  i18n.global.setMissingHandler((locale, key) => {
    missing.push(`${locale}:${key}`)
    return key
  })
  vi.stubGlobal('fetch', async (input: RequestInfo | URL) =>
    String(input).startsWith('/api/v1/models')
      ? jsonResponse(200, { models: MODELS, next_page_token: '' })
      : jsonResponse(200, { knowledge_bases: [], next_page_token: '' }),
  )
})

afterEach(() => {
  vi.unstubAllGlobals()
  session.credentials = null
})

async function renderSettings(knowledgeBase: KnowledgeBase, locale: Locale): Promise<string> {
  i18n.global.locale.value = locale
  const app = createSSRApp({
    render: () => h(NMessageProvider, null, { default: () => h(KnowledgeBaseSettings, { knowledgeBase }) }),
  }).use(i18n)
  collectStyles(app)
  return renderToString(app)
}

/** Every form control has a label naming it, and every button a name. */
function expectLabelled(html: string) {
  const ids = [...html.matchAll(/<(?:input|select|textarea)\b[^>]*\bid="([^"]+)"/g)].map((m) => m[1])
  expect(ids.length).toBeGreaterThan(0)
  for (const id of ids) expect(html, `label of ${id}`).toMatch(new RegExp(`<label[^>]*for="${id}"`))
  for (const [button] of html.matchAll(/<button\b[^>]*>[\s\S]*?<\/button>/g)) {
    const text = button.replace(/<[^>]+>/g, '').trim()
    expect(text || /aria-label="[^"]+"/.test(button), button).toBeTruthy()
  }
}

const running: EmbeddingMigration = {
  from_model_id: 'm-bge',
  to_model_id: 'm-e5',
  state: 'running',
  documents_done: 3,
  documents_total: 10,
  failure_reason: '',
  start_time: TIME,
  end_time: null,
}

describe('the settings panel', () => {
  for (const locale of LOCALES) {
    it(`shows the configuration and its form (${locale})`, async () => {
      const html = await renderSettings(kb, locale)
      expect(missing).toEqual([])
      expect(html).toContain('Multilingual BGE (BAAI/bge-m3)')
      expect(html).toContain('1,024')
      expect(html).toContain(locale === 'zh' ? '按标题' : 'Along headings')
      expect(html).toContain('512')
      // The heading strategy's sizes only; the edit form is closed until asked for.
      expect(html).toContain('id="kb-settings-chunking-chunk-size-tokens"')
      expect(html).not.toContain('id="kb-settings-chunking-parent-size-tokens"')
      expect(html).toMatch(/<details class="kb-settings-edit"(?![^>]*\bopen)[^>]*>/)
      expectLabelled(html)
    })

    it(`shows a running migration with its progress (${locale})`, async () => {
      const html = await renderSettings({ ...kb, migration: running }, locale)
      expect(missing).toEqual([])
      expect(html).toContain(
        locale === 'zh' ? '正在用 E5 large (intfloat/e5-large) 重新向量化所有文档：已完成 3 / 10 个文档' : 'with E5 large (intfloat/e5-large): 3 of 10 documents done',
      )
      expect(html).toMatch(/role="progressbar"/)
      // No other model is chosen while one migration runs.
      expect(html).toMatch(/<select[^>]*id="kb-settings-embedding-model-id"[^>]*disabled/)
    })
  }

  it('says why a migration failed and that the old model stays', async () => {
    const failed = { ...running, state: 'failed' as const, failure_reason: 'the model answered 503', end_time: TIME }
    const html = await renderSettings({ ...kb, migration: failed }, 'en')
    expect(html).toContain('The migration to E5 large (intfloat/e5-large) failed: the model answered 503. Multilingual BGE (BAAI/bge-m3) stays in use.')
    expect(html).not.toMatch(/role="progressbar"/)
  })

  it('mentions a finished migration without progress', async () => {
    const done = { ...running, state: 'completed' as const, documents_done: 10, end_time: TIME }
    const html = await renderSettings({ ...kb, embedding_model_id: 'm-e5', migration: done }, 'en')
    expect(html).toContain('The last migration, from Multilingual BGE (BAAI/bge-m3) to E5 large (intfloat/e5-large), has finished.')
    expect(html).not.toMatch(/role="progressbar"/)
    expect(html).not.toMatch(/<select[^>]*id="kb-settings-embedding-model-id"[^>]*disabled/)
  })
})

describe('the create form', () => {
  for (const locale of LOCALES) {
    it(`offers the advanced settings closed, the embedding models listed (${locale})`, async () => {
      session.credentials = { kind: 'local' }
      i18n.global.locale.value = locale
      const router = createAppRouter(createMemoryHistory('/ui/'))
      const app = createSSRApp(App).use(i18n).use(router)
      collectStyles(app)
      await router.push('/knowledge')
      await router.isReady()
      const html = await renderToString(app)
      expect(missing).toEqual([])
      expect(html).toMatch(/<details class="kb-advanced"(?![^>]*\bopen)[^>]*><summary\b/)
      expect(html).toContain(
        locale === 'zh' ? '默认向量化模型：Multilingual BGE (BAAI/bge-m3)' : 'The default embedding model: Multilingual BGE (BAAI/bge-m3)',
      )
      expect(html).toMatch(/<option value="m-e5"[^>]*>E5 large \(intfloat\/e5-large\)<\/option>/)
      expect(html).toContain('id="kb-chunking-chunk-size-tokens"')
      expect(html).not.toContain('id="kb-chunking-child-size-tokens"')
      expect(html).toContain('id="kb-graph-enabled"')
      expectLabelled(html.slice(html.indexOf('<form class="kb-form'), html.indexOf('</form>')))
    })
  }
})
