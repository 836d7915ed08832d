/**
 * The configuration pages rendered on the server side of Vue (no browser, no DOM) against a fake
 * gateway answering hand-written bodies shaped like the routes' responses (api/{models,agents,
 * applications,tools,memory}.py): each page in both languages, without a message key missing, showing
 * the records it read, never a secret, every control labelled, every button named, headings in order.
 */
import { setup as collectStyles } from '@css-render/vue3-ssr'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createSSRApp } from 'vue'
import { renderToString } from 'vue/server-renderer'
import { createMemoryHistory } from 'vue-router'

import App from '../src/App.vue'
import { session } from '../src/client'
import { i18n, LOCALES, type Locale } from '../src/i18n'
import { createAppRouter } from '../src/router'
import { jsonResponse } from './fakeFetch'

const TIME = '2025-03-01T09:30:00Z'

const openai = {
  id: 'openai',
  display_name: 'OpenAI',
  default_base_url: 'https://api.openai.com/v1',
  capabilities: {
    model_types: ['knowledge_qa', 'vlm', 'embedding'],
    logprobs: true,
    cache_breakpoints: false,
    cached_token_usage: true,
    tool_calls: true,
    json_schema_output: true,
    image_input: 'url_or_data_url',
    local: false,
    requires_api_key: true,
    openai_compatible: true,
  },
  docs_url: 'https://platform.openai.com/docs',
}

const gpt = {
  id: 'm1',
  display_name: 'GPT-4o',
  provider_id: 'openai',
  model_name: 'gpt-4o',
  types: ['knowledge_qa', 'vlm'],
  base_url: '',
  parameters: { temperature: 0.3, max_tokens: null, context_window: 128000, embedding_dimension: null, extra: null },
  api_key_hint: 'sk-…a1b2',
  builtin: false,
  tenant_id: 't1',
  default_for: ['knowledge_qa'],
  create_time: TIME,
  update_time: TIME,
  description: 'Answers and reads images',
}

const localEmbedding = {
  ...gpt,
  id: 'm0',
  display_name: 'Local embedding',
  provider_id: 'local',
  model_name: 'BAAI/bge-m3',
  types: ['embedding'],
  parameters: null,
  api_key_hint: '',
  builtin: true,
  tenant_id: '',
  default_for: [],
  description: '',
}

const agent = {
  id: 'a1',
  name: 'support',
  display_name: 'Support desk',
  description: 'Answers product questions',
  system_prompt: 'You help customers of the shop.',
  model_id: 'm1',
  model_parameters: { temperature: 0.2, max_tokens: null },
  tool_names: ['kb_search'],
  knowledge_base_ids: ['kb1'],
  skill_names: ['pdf-report'],
  active: true,
  create_time: TIME,
  update_time: TIME,
  model_types: ['LLM'],
}

const tools = [
  {
    name: 'kb_search',
    display_name: 'Knowledge base search',
    description: 'Searches the selected knowledge bases.',
    parameters_json_schema: '{"type":"object"}',
    category: 'knowledge_base',
    selectable: true,
    produces_sources: true,
  },
  {
    name: 'write_plan',
    display_name: 'Plan writer',
    description: 'Run-time planning.',
    parameters_json_schema: '{"type":"object"}',
    category: 'runtime',
    selectable: false,
    produces_sources: false,
  },
]

const knowledgeBase = {
  id: 'kb1',
  name: 'Handbook',
  description: '',
  embedding_model_id: 'm0',
  graph_enabled: false,
  language_hint: 'en',
  document_count: 3,
  chunk_count: 40,
  size_bytes: 100000,
  create_time: TIME,
  update_time: TIME,
}

const skill = {
  name: 'pdf-report',
  description: 'Builds a PDF report from notes.',
  instructions_path: '/skills/pdf-report/SKILL.md',
  has_scripts: true,
  file_count: 2,
  update_time: TIME,
}

const orchestrator = <T extends { id: string }>(fields: T) => ({
  description: '',
  member_agent_ids: [],
  config: {},
  active: true,
  create_time: TIME,
  update_time: TIME,
  ...fields,
})

const orchestrators = [
  orchestrator({ id: 'o1', name: 'helpdesk', display_name: 'Help desk', mode: 'single', member_agent_ids: ['a1'], config: { agent_id: 'a1' } }),
  orchestrator({
    id: 'o2',
    name: 'partner',
    display_name: 'Partner bot',
    mode: 'external',
    config: { provider: 'dify', base_url: 'https://dify.example.com/v1', timeout_seconds: 60, api_key_hint: 'app-…9f3c' },
  }),
  orchestrator({
    id: 'o3',
    name: 'router',
    display_name: 'Invoice router',
    mode: 'conditional',
    member_agent_ids: ['a1'],
    config: { routes: [{ condition: { keywords: ['invoice'] }, agent_id: 'a1' }], default_agent_id: 'a1' },
  }),
]

const application = <T extends { id: string }>(fields: T) => ({
  display_name: '',
  orchestrator_id: 'o1',
  active: true,
  rate_limit_per_second: 5,
  rate_limit_burst: 10,
  tenant_id: 't1',
  created_by: 'u1',
  create_time: TIME,
  update_time: TIME,
  platform_config: {},
  platform_secrets: {},
  callback_path: null,
  ...fields,
})

const applications = [
  application({
    id: 'app_1',
    name: 'wecom-help',
    display_name: 'WeCom help',
    platform: 'wework_aibot',
    platform_config: { bot_id: 'bot42' },
    platform_secrets: { token: '…ab12', encoding_aes_key: '…Zx9Q' },
    callback_path: '/api/v1/wecom/t1/app_1/callback',
  }),
  application({ id: 'app_2', name: 'public-api', display_name: 'Public API', platform: 'api_service' }),
]

/** The gateway's answer to a GET of `path` (query left out), or undefined for a path it does not have. */
function answer(path: string): unknown {
  const routes: Record<string, unknown> = {
    '/api/v1/providers': { providers: [openai] },
    '/api/v1/models': { models: [localEmbedding, gpt], next_page_token: '' },
    '/api/v1/models/m1': gpt,
    '/api/v1/models/m1/usages': {
      usages: [{ model_id: 'm1', consumer_kind: 'agent', consumer_id: 'a1', consumer_name: 'support', create_time: TIME }],
      next_page_token: '',
    },
    '/api/v1/agents': { agents: [agent], next_page_token: '' },
    '/api/v1/agents/a1': agent,
    '/api/v1/tools': { tools, omitted: [] },
    '/api/v1/knowledge-bases': { knowledge_bases: [knowledgeBase], next_page_token: '' },
    '/api/v1/skills': { skills: [skill], next_page_token: '' },
    '/api/v1/skills/pdf-report': {
      skill,
      instructions: '# PDF report\nRun scripts/build.py with the notes.',
      files: [
        { path: 'SKILL.md', size_bytes: 120, script: false },
        { path: 'scripts/build.py', size_bytes: 2048, script: true },
      ],
    },
    '/api/v1/orchestrators': { orchestrators, next_page_token: '' },
    '/api/v1/applications': { applications },
    '/api/v1/memory/items': {
      items: [
        {
          id: 'mi1',
          kind: 'profile',
          content: 'I work on the billing team',
          source_session_id: 's1',
          source_message_id: 'msg1',
          create_time: TIME,
        },
      ],
      next_page_token: 'p2',
    },
    '/api/v1/memory/frequent-documents': {
      documents: [{ document_id: 'd1', knowledge_base_id: 'kb1', file_name: 'handbook.pdf', hit_count: 4, last_cited_time: TIME }],
      next_page_token: '',
    },
  }
  for (const o of orchestrators) routes[`/api/v1/orchestrators/${o.id}`] = o
  for (const a of applications) routes[`/api/v1/applications/${a.id}`] = a
  const type = /^\/api\/v1\/models\/defaults\/(\w+)$/.exec(path)?.[1]
  if (type) {
    return type === 'knowledge_qa'
      ? { type, model: gpt, source: 'tenant' }
      : type === 'embedding'
        ? { type, model: localEmbedding, source: 'builtin' }
        : { type, model: null, source: 'none' }
  }
  return routes[path]
}

const missing: string[] = []
const requests: string[] = []

beforeEach(() => {
  missing.length = 0
  requests.length = 0
  i18n.global.setMissingHandler((locale, key) => {
    missing.push(`${locale}:${key}`)
    return key
  })
  vi.stubGlobal('fetch', async (input: string, init: RequestInit = {}) => {
    const method = init.method ?? 'GET'
    requests.push(`${method} ${input}`)
    const path = input.split('?')[0]
    const body = method === 'GET' ? answer(path) : undefined
    if (body === undefined) return jsonResponse(404, { error: { code: 'not_found', message: `no route ${method} ${path}` } })
    return jsonResponse(200, body)
  })
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

/** The page's own part of the HTML (the header's controls are the app's). */
function main(html: string): string {
  return html.slice(html.indexOf('<main id="main"'))
}

const text = (html: string) => html.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim()
const attribute = (tag: string, name: string) => new RegExp(`\\s${name}="([^"]*)"`).exec(tag)?.[1]

/** Every form control has a label (`<label for>`, aria-label or aria-labelledby). */
function unlabelledControls(html: string): string[] {
  const labelled = new Set([...html.matchAll(/<label[^>]*\sfor="([^"]+)"/g)].map((m) => m[1]))
  return [...html.matchAll(/<(input|select|textarea)\b[^>]*>/g)]
    .map((m) => m[0])
    .filter((tag) => attribute(tag, 'type') !== 'hidden')
    .filter((tag) => {
      const id = attribute(tag, 'id')
      return !(id && labelled.has(id)) && !attribute(tag, 'aria-label') && !attribute(tag, 'aria-labelledby')
    })
}

/** Every button says what it does: by its text or an aria-label. */
function unnamedButtons(html: string): string[] {
  return [...html.matchAll(/<button\b([^>]*)>([\s\S]*?)<\/button>/g)]
    .filter(([, attributes, inner]) => !/\saria-label="[^"]+"/.test(attributes) && text(inner) === '')
    .map(([tag]) => tag.slice(0, 120))
}

/** Heading levels never skip one going down (h1 then h3 is a skip). */
function headingSkips(html: string): string[] {
  const levels = [...html.matchAll(/<h([1-6])\b/g)].map((m) => Number(m[1]))
  return levels.flatMap((level, i) => (i > 0 && level > levels[i - 1] + 1 ? [`h${levels[i - 1]} → h${level}`] : []))
}

interface PageCase {
  path: string
  /** Texts the page shows from the records it read (the same in both languages). */
  shows: string[]
}

const PAGES: PageCase[] = [
  { path: '/models', shows: ['GPT-4o', 'Local embedding', 'id="default-knowledge_qa"'] },
  { path: '/models/new', shows: ['OpenAI', 'id="model-api-key"'] },
  { path: '/models/m1', shows: ['value="GPT-4o"', 'value="gpt-4o"', 'sk-…a1b2', 'support'] },
  { path: '/agents', shows: ['Support desk', 'GPT-4o', 'Answers product questions'] },
  { path: '/agents/new', shows: ['Knowledge base search', 'id="agent-tool-option-kb_search"'] },
  { path: '/agents/a1', shows: ['value="support"', 'You help customers of the shop.', 'Knowledge base search', 'Handbook', 'pdf-report'] },
  { path: '/orchestrators', shows: ['Help desk', 'Partner bot', 'Invoice router', 'Support desk'] },
  { path: '/orchestrators/new', shows: ['id="orch-config-agent-id"', 'Support desk'] },
  { path: '/orchestrators/o1', shows: ['value="helpdesk"', 'Support desk'] },
  { path: '/orchestrators/o2', shows: ['value="partner"', 'https://dify.example.com/v1', 'app-…9f3c', 'id="orch-config-api-key"'] },
  { path: '/orchestrators/o3', shows: ['invoice', 'default_agent_id', 'id="orch-config"'] },
  { path: '/applications', shows: ['WeCom help', 'Public API', '/api/v1/wecom/t1/app_1/callback', 'POST /v1/chat/completions', 'Help desk'] },
  { path: '/applications/new', shows: ['Help desk', 'id="app-orchestrator-id"'] },
  { path: '/applications/app_1', shows: ['value="wecom-help"', '/api/v1/wecom/t1/app_1/callback', '…ab12', '…Zx9Q', 'value="bot42"'] },
  { path: '/skills', shows: ['pdf-report', 'Builds a PDF report from notes.'] },
  { path: '/skills/pdf-report', shows: ['# PDF report', 'scripts/build.py', '/skills/pdf-report/SKILL.md'] },
  { path: '/memory', shows: ['I work on the billing team', 'handbook.pdf', 'id="memory-kind"'] },
]

describe('configuration pages', () => {
  for (const locale of LOCALES) {
    for (const page of PAGES) {
      it(`render ${page.path} with its records (${locale})`, async () => {
        const html = main(await render(page.path, locale))
        for (const shown of page.shows) expect(html).toContain(shown)
        expect(html).not.toContain('role="alert"') // nothing failed to load
        expect(missing).toEqual([])
        expect(unlabelledControls(html)).toEqual([])
        expect(unnamedButtons(html)).toEqual([])
        expect(headingSkips(html)).toEqual([])
        expect(html.match(/<h1\b/g)).toHaveLength(1)
      })
    }
  }

  it('list in the navigation in order after chat and knowledge bases', async () => {
    const html = await render('/agents', 'en')
    const nav = html.slice(html.indexOf('<nav'), html.indexOf('</nav>'))
    const order = ['Agents', 'Orchestrators', 'Applications', 'Skills', 'Models', 'Memory'].map((label) => nav.indexOf(`>${label}<`))
    expect(order.every((position) => position > nav.indexOf('>Knowledge bases<'))).toBe(true)
    expect([...order].sort((a, b) => a - b)).toEqual(order)
  })

  it('never put a stored secret into a field: key and channel secret fields stay empty', async () => {
    for (const path of ['/models/m1', '/orchestrators/o2', '/applications/app_1']) {
      const html = main(await render(path, 'en'))
      const passwords = [...html.matchAll(/<input\b[^>]*type="password"[^>]*>/g)].map((m) => m[0])
      expect(passwords.length, path).toBeGreaterThan(0)
      for (const tag of passwords) {
        expect(attribute(tag, 'value') ?? '', path).toBe('')
        expect(attribute(tag, 'autocomplete'), path).toBe('new-password')
      }
    }
  })

  it('list whether a model has a key stored, and nothing of the key', async () => {
    const html = main(await render('/models', 'en'))
    const rows = html.slice(html.indexOf('id="models-list-title"'))
    expect(text(rows)).toContain('GPT-4o gpt-4o OpenAI Chat (LLM) Vision (VLM) Default: Chat (LLM) Stored')
    expect(text(rows)).toContain('None stored')
    expect(rows).not.toContain('a1b2')
  })

  it('show only the selectable tools to an agent, with the selected ones checked', async () => {
    const html = main(await render('/agents/a1', 'en'))
    expect(html).not.toContain('Plan writer')
    expect(html).toMatch(/<input id="agent-tool-option-kb_search" type="checkbox"[^>]*checked/)
  })

  it('show a failed read with the server message and a way to try again', async () => {
    vi.stubGlobal('fetch', async () =>
      jsonResponse(503, { error: { code: 'unavailable', message: 'the conversation service is unavailable; try again shortly' } }),
    )
    for (const locale of LOCALES) {
      const html = main(await render('/agents', locale))
      expect(html).toContain('role="alert"')
      expect(html).toContain('the conversation service is unavailable; try again shortly')
      expect(html).toContain(locale === 'en' ? 'Try again' : '重试')
      expect(missing).toEqual([])
    }
  })

  it('say when a list is empty', async () => {
    vi.stubGlobal('fetch', async () => jsonResponse(200, { agents: [], next_page_token: '' }))
    const html = main(await render('/agents', 'en'))
    expect(html).toContain('No agent yet.')
    expect(html).not.toContain('<table')
  })

  it('read the records in the gateway\'s routes', async () => {
    await render('/memory', 'en')
    expect(requests).toContain('GET /api/v1/memory/items')
    expect(requests).toContain('GET /api/v1/memory/frequent-documents')
    requests.length = 0
    await render('/models', 'en')
    expect(requests).toEqual(
      expect.arrayContaining(['GET /api/v1/models', 'GET /api/v1/providers', 'GET /api/v1/models/defaults/knowledge_qa', 'GET /api/v1/models/defaults/asr']),
    )
  })
})
