/** The client of the configuration routes against a fake `fetch`: the paths and bodies the gateway's
 * routes take (api/{models,agents,applications,tools,memory}.py), write-only secrets sent only when
 * typed, and lists read page by page. */
import { describe, expect, it } from 'vitest'

import { ApiClient, sessionCredentials } from '../src/lib/api'
import {
  AdminApi,
  agentBody,
  agentDraft,
  applicationBody,
  applicationDraft,
  configAgentIds,
  fieldOf,
  modelCreateBody,
  modelDraft,
  modelUpdateBody,
  orchestratorBody,
  orchestratorDraft,
  secretChange,
  type Application,
} from '../src/lib/adminApi'
import { fakeFetch, jsonResponse, memoryStorage, type Answer } from './fakeFetch'

function client(...answers: Answer[]) {
  const fake = fakeFetch(...answers)
  const api = new ApiClient({ fetch: fake.fetch, credentials: sessionCredentials(memoryStorage()) })
  return { admin: new AdminApi(api), requests: fake.requests }
}

const sent = (body: unknown) => JSON.parse(String(body)) as Record<string, unknown>
const ok = (body: unknown = {}): Answer => () => jsonResponse(200, body)
const noContent: Answer = () => jsonResponse(204, null)

describe('write-only secrets', () => {
  it('send nothing for an empty field, an empty string to remove, the trimmed value otherwise', () => {
    expect(secretChange('')).toBeUndefined()
    expect(secretChange('   ')).toBeUndefined()
    expect(secretChange('', true)).toBe('')
    expect(secretChange('sk-new', true)).toBe('')
    expect(secretChange('  sk-new \n')).toBe('sk-new')
  })
})

describe('models', () => {
  const stored = {
    id: 'm1',
    display_name: 'GPT-4o',
    provider_id: 'openai',
    model_name: 'gpt-4o',
    types: ['knowledge_qa' as const],
    base_url: '',
    parameters: { temperature: 0.3, max_tokens: null, context_window: 128000, embedding_dimension: null, extra: { enable_thinking: false } },
    api_key_hint: 'sk-…a1b2',
    description: '',
  }

  it('create a model without a key field when none is typed', async () => {
    const { admin, requests } = client(ok(stored))
    const draft = { ...modelDraft(), display_name: ' GPT-4o ', provider_id: 'openai', model_name: 'gpt-4o', types: ['knowledge_qa' as const] }
    await admin.createModel(modelCreateBody(draft))
    expect(requests[0].method).toBe('POST')
    expect(requests[0].url).toBe('/api/v1/models')
    const body = sent(requests[0].body)
    expect(body).toEqual({ display_name: 'GPT-4o', provider_id: 'openai', model_name: 'gpt-4o', types: ['knowledge_qa'], base_url: '', description: '' })
    expect('api_key' in body).toBe(false)
  })

  it('create a model with the key typed and the parameters given', () => {
    const body = modelCreateBody({ ...modelDraft(), provider_id: 'openai', types: ['embedding'], embedding_dimension: 1024, api_key: 'sk-abc' })
    expect(body.api_key).toBe('sk-abc')
    expect(body.parameters).toEqual({ embedding_dimension: 1024 })
  })

  it('change a model keeping its key when the key field stays empty', async () => {
    const { admin, requests } = client(ok(stored))
    const draft = modelDraft(stored)
    expect(draft.api_key).toBe('') // the hint is never put into the field
    await admin.updateModel('m1', modelUpdateBody({ ...draft, temperature: 0.5 }))
    expect(requests[0].method).toBe('PATCH')
    expect(requests[0].url).toBe('/api/v1/models/m1')
    const body = sent(requests[0].body)
    expect('api_key' in body).toBe(false)
    expect('provider_id' in body).toBe(false) // the provider of a model cannot change
    expect(body.parameters).toEqual({ temperature: 0.5, context_window: 128000, extra: { enable_thinking: false } })
    expect(JSON.stringify(body)).not.toContain('sk-…a1b2')
  })

  it('replace or remove the stored key only when asked', () => {
    expect(modelUpdateBody({ ...modelDraft(stored), api_key: 'sk-new' }).api_key).toBe('sk-new')
    expect(modelUpdateBody({ ...modelDraft(stored), remove_api_key: true }).api_key).toBe('')
  })

  it('clear every parameter by sending an empty set (a change replaces the set)', () => {
    const draft = { ...modelDraft(stored), temperature: null, context_window: null, extra: null }
    expect(modelUpdateBody(draft).parameters).toEqual({})
  })

  it('read every page of the models, of one type when asked', async () => {
    const { admin, requests } = client(
      ok({ models: [{ id: 'm0' }], next_page_token: 'p2' }),
      ok({ models: [{ id: 'm1' }], next_page_token: '' }),
    )
    expect((await admin.listModels('vlm')).map((m) => m.id)).toEqual(['m0', 'm1'])
    expect(requests.map((r) => r.url)).toEqual(['/api/v1/models?type=vlm', '/api/v1/models?type=vlm&page_token=p2'])
  })

  it('get and set the default of a type, and read usages and providers', async () => {
    const { admin, requests } = client(
      ok({ type: 'rerank', model: null, source: 'none' }),
      ok({ type: 'rerank', model: { id: 'r1' }, source: 'tenant' }),
      ok({ usages: [{ consumer_kind: 'agent', consumer_id: 'a1' }], next_page_token: '' }),
      ok({ providers: [{ id: 'openai' }] }),
      noContent,
    )
    expect((await admin.getDefaultModel('rerank')).source).toBe('none')
    expect((await admin.setDefaultModel('rerank', 'r1')).model?.id).toBe('r1')
    expect(await admin.listModelUsages('m 1')).toHaveLength(1)
    expect((await admin.listProviders())[0].id).toBe('openai')
    await admin.deleteModel('m1')
    expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'GET /api/v1/models/defaults/rerank',
      'PUT /api/v1/models/defaults/rerank',
      'GET /api/v1/models/m%201/usages',
      'GET /api/v1/providers',
      'DELETE /api/v1/models/m1',
    ])
    expect(sent(requests[1].body)).toEqual({ model_id: 'r1' })
  })
})

describe('agents', () => {
  const stored = {
    id: 'a1',
    name: 'support',
    display_name: 'Support desk',
    description: '',
    system_prompt: 'You help.',
    model_id: 'm1',
    model_parameters: { temperature: 0.2, max_tokens: null },
    tool_names: ['kb_search'],
    knowledge_base_ids: ['kb1'],
    skill_names: [],
    active: true,
    model_types: ['LLM', 'VISION'],
  }

  it('create an agent with its lists and model types, without empty overrides', async () => {
    const { admin, requests } = client(ok(stored))
    const draft = { ...agentDraft(), name: 'support', tool_names: ['kb_search'], vision: true }
    await admin.createAgent(agentBody(draft))
    expect(requests[0].url).toBe('/api/v1/agents')
    const body = sent(requests[0].body)
    expect(body).toMatchObject({ name: 'support', model_id: '', tool_names: ['kb_search'], model_types: ['LLM', 'VISION'], active: true })
    expect('model_parameters' in body).toBe(false)
  })

  it('change an agent replacing its lists and clearing overrides left empty', async () => {
    const { admin, requests } = client(ok(stored))
    const draft = agentDraft(stored)
    expect(draft.vision).toBe(true)
    await admin.updateAgent('a1', agentBody({ ...draft, temperature: null, vision: false, knowledge_base_ids: [] }, true))
    expect(requests[0].method).toBe('PATCH')
    expect(requests[0].url).toBe('/api/v1/agents/a1')
    const body = sent(requests[0].body)
    expect(body.model_parameters).toEqual({})
    expect(body.model_types).toEqual(['LLM'])
    expect(body.knowledge_base_ids).toEqual([])
  })

  it('read the agents page by page, then tools and skills', async () => {
    const { admin, requests } = client(
      ok({ agents: [{ id: 'a1' }], next_page_token: 'n1' }),
      ok({ agents: [{ id: 'a2' }], next_page_token: '' }),
      ok({ tools: [{ name: 'kb_search', selectable: true }], omitted: [] }),
      ok({ skills: [{ name: 'pdf' }], next_page_token: '' }),
      noContent,
    )
    expect((await admin.listAgents()).map((a) => a.id)).toEqual(['a1', 'a2'])
    expect((await admin.listTools())[0].name).toBe('kb_search')
    expect((await admin.listSkills())[0].name).toBe('pdf')
    await admin.deleteAgent('a1')
    expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'GET /api/v1/agents',
      'GET /api/v1/agents?page_token=n1',
      'GET /api/v1/tools',
      'GET /api/v1/skills',
      'DELETE /api/v1/agents/a1',
    ])
  })
})

describe('orchestrators', () => {
  const external = {
    id: 'o2',
    name: 'partner',
    display_name: 'Partner',
    description: '',
    mode: 'external' as const,
    member_agent_ids: [],
    config: { provider: 'dify', base_url: 'https://dify.example.com/v1', timeout_seconds: 60, api_key_hint: 'app-…9f3c' },
    active: true,
  }

  it('keep the stored external key by sending no api_key (and never the hint)', async () => {
    const { admin, requests } = client(ok(external))
    const draft = orchestratorDraft(external)
    expect(draft.api_key_hint).toBe('app-…9f3c')
    const body = orchestratorBody(draft)
    if (!('value' in body)) throw new Error('expected a body')
    await admin.updateOrchestrator('o2', body.value)
    expect(requests[0].method).toBe('PATCH')
    expect(requests[0].url).toBe('/api/v1/orchestrators/o2')
    expect(sent(requests[0].body).config).toEqual({ provider: 'dify', base_url: 'https://dify.example.com/v1', timeout_seconds: 60 })
  })

  it('send a typed external key, an empty one to remove it, and a header only for n8n', () => {
    const config = (changes: object) => {
      const body = orchestratorBody({ ...orchestratorDraft(external), ...changes })
      return 'value' in body ? body.value.config : null
    }
    expect(config({ api_key: ' app-new ' })).toMatchObject({ api_key: 'app-new' })
    expect(config({ remove_api_key: true })).toMatchObject({ api_key: '' })
    expect(config({ auth_header: 'X-Key' })).not.toHaveProperty('auth_header')
    expect(config({ provider: 'n8n', auth_header: 'X-Key' })).toMatchObject({ auth_header: 'X-Key' })
  })

  it('build each form mode configuration', () => {
    const body = (changes: object) => {
      const built = orchestratorBody({ ...orchestratorDraft(), name: 'o', ...changes })
      return 'value' in built ? built.value : null
    }
    expect(body({ mode: 'single', agent_id: 'a1' })?.config).toEqual({ agent_id: 'a1' })
    expect(body({ mode: 'deep_agent', agent_id: 'a1' })?.config).toEqual({ agent_id: 'a1', backend: 'sandbox' })
    expect(body({ mode: 'supervisor', supervisor_agent_id: 's', worker_agent_ids: ['w1'], max_hops: 3 })?.config).toEqual({
      supervisor_agent_id: 's',
      worker_agent_ids: ['w1'],
      enable_summarization: false,
      max_hops: 3,
    })
    expect(body({ mode: 'collaboration', agent_ids: ['a', 'b'] })?.config).toEqual({ agent_ids: ['a', 'b'], collaboration_strategy: 'sequential' })
    expect(body({ mode: 'knowledge_base', knowledge_base_ids: ['kb1'] })?.config).toEqual({ knowledge_base_ids: ['kb1'], knowledge_graph: false })
  })

  it('check a JSON configuration before sending it', () => {
    const draft = { ...orchestratorDraft(), mode: 'workflow' as const }
    expect(orchestratorBody({ ...draft, config_json: '{"steps": [' })).toMatchObject({ problem: 'syntax' })
    expect(orchestratorBody({ ...draft, config_json: '[1, 2]' })).toEqual({ problem: 'not_object' })
    expect(orchestratorBody({ ...draft, config_json: `{"x": "${'y'.repeat(70 * 1024)}"}` })).toEqual({ problem: 'too_large' })
    const body = orchestratorBody({ ...draft, config_json: '{"steps": [{"id": "a", "kind": "agent", "agent_id": "a1"}]}' })
    expect('value' in body && body.value.config).toEqual({ steps: [{ id: 'a', kind: 'agent', agent_id: 'a1' }] })
  })

  it('keep apart the members the configuration names from the further ones', () => {
    const conditional = {
      ...external,
      mode: 'conditional' as const,
      member_agent_ids: ['a1', 'a2', 'a3'],
      config: { routes: [{ condition: { keywords: ['x'] }, agent_id: 'a1' }], default_agent_id: 'a2' },
    }
    expect(configAgentIds(conditional.config)).toEqual(['a1', 'a2'])
    const draft = orchestratorDraft(conditional)
    expect(draft.extra_member_ids).toEqual(['a3'])
    expect(JSON.parse(draft.config_json)).toEqual(conditional.config)
    const body = orchestratorBody(draft)
    expect('value' in body && body.value.member_agent_ids).toEqual(['a3'])
  })
})

describe('applications', () => {
  const aibot: Application = {
    id: 'app_1',
    name: 'wecom-help',
    display_name: 'WeCom help',
    platform: 'wework_aibot',
    orchestrator_id: 'o1',
    active: true,
    rate_limit_per_second: 5,
    rate_limit_burst: 10,
    tenant_id: 't1',
    created_by: 'u1',
    create_time: '',
    update_time: '',
    platform_config: { bot_id: 'bot42' },
    platform_secrets: { token: '…ab12', encoding_aes_key: '…Zx9Q' },
    callback_path: '/api/v1/wecom/t1/app_1/callback',
  }

  it('create a WeCom application with the settings of its platform only', async () => {
    const { admin, requests } = client(ok(aibot))
    const draft = {
      ...applicationDraft(),
      name: 'wecom-help',
      platform: 'wework_traditional' as const,
      orchestrator_id: 'o1',
      corp_id: 'ww1',
      agent_id: 1000002,
      bot_id: 'ignored',
      secrets: { token: 'tok123', encoding_aes_key: 'k'.repeat(43), secret: 'appsecret1' },
    }
    await admin.createApplication(applicationBody(draft))
    expect(requests[0].url).toBe('/api/v1/applications')
    const body = sent(requests[0].body)
    expect(body.platform_config).toEqual({
      corp_id: 'ww1',
      agent_id: 1000002,
      token: 'tok123',
      encoding_aes_key: 'k'.repeat(43),
      secret: 'appsecret1',
      message_format: 'text',
    })
    expect('rate_limit_per_second' in body).toBe(false) // the gateway's per-caller rate applies
  })

  it('change a WeCom application keeping the secrets left empty', async () => {
    const { admin, requests } = client(ok(aibot))
    const draft = applicationDraft(aibot)
    expect(draft.secrets).toEqual({ token: '', encoding_aes_key: '', secret: '' })
    await admin.updateApplication('app_1', applicationBody({ ...draft, bot_id: 'bot43' }, aibot))
    expect(requests[0].method).toBe('PATCH')
    expect(requests[0].url).toBe('/api/v1/applications/app_1')
    const body = sent(requests[0].body)
    expect(body.platform_config).toEqual({ bot_id: 'bot43' })
    expect(JSON.stringify(body)).not.toContain('…ab12')
  })

  it('send a new secret, and the whole settings when the platform changes', () => {
    const draft = applicationDraft(aibot)
    const typed = applicationBody({ ...draft, secrets: { ...draft.secrets, token: 'newtoken1' } }, aibot)
    expect(typed.platform_config).toEqual({ bot_id: 'bot42', token: 'newtoken1' })
    const moved = applicationBody({ ...draft, platform: 'wework_traditional', corp_id: 'ww1' }, aibot)
    expect(moved.platform_config).toEqual({ corp_id: 'ww1', message_format: 'text' })
    const api = applicationBody({ ...draft, platform: 'api_service' }, aibot)
    expect(api).not.toHaveProperty('platform_config')
  })

  it('list the applications in one call and delete one', async () => {
    const { admin, requests } = client(ok({ applications: [aibot] }), noContent)
    expect((await admin.listApplications())[0].callback_path).toBe('/api/v1/wecom/t1/app_1/callback')
    await admin.deleteApplication('app_1')
    expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual(['GET /api/v1/applications', 'DELETE /api/v1/applications/app_1'])
  })
})

describe('skills', () => {
  it('read a skill file as text when it is text, and say when it was cut', async () => {
    const { admin, requests } = client(
      () => new Response('print("hi")\n', { status: 200, headers: { 'content-type': 'text/x-python; charset=utf-8', 'x-ks-truncated': 'true' } }),
      () => new Response(new Uint8Array([0, 1, 2]), { status: 200, headers: { 'content-type': 'image/png', 'x-ks-truncated': 'false' } }),
    )
    expect(await admin.readSkillFile('pdf', 'scripts/build.py')).toEqual({
      contentType: 'text/x-python; charset=utf-8',
      text: 'print("hi")\n',
      truncated: true,
    })
    expect(await admin.readSkillFile('pdf', 'logo.png')).toEqual({ contentType: 'image/png', text: null, truncated: false })
    expect(requests[0].url).toBe('/api/v1/skills/pdf/file?path=scripts%2Fbuild.py')
  })
})

describe('memory', () => {
  it('read one page of items at a time, of the kinds asked', async () => {
    const { admin, requests } = client(
      ok({ items: [{ id: 'i1' }], next_page_token: 'p2' }),
      ok({ items: [{ id: 'i2' }], next_page_token: '' }),
    )
    const first = await admin.listMemoryItems(['profile', 'fact'])
    expect(first).toEqual({ items: [{ id: 'i1' }], nextPageToken: 'p2' })
    const second = await admin.listMemoryItems(['profile', 'fact'], first.nextPageToken)
    expect(second.nextPageToken).toBe('')
    expect(requests.map((r) => r.url)).toEqual([
      '/api/v1/memory/items?kind=profile&kind=fact',
      '/api/v1/memory/items?kind=profile&kind=fact&page_token=p2',
    ])
  })

  it('edit an item, forget one, and read the frequent documents', async () => {
    const { admin, requests } = client(
      ok({ id: 'i1', kind: 'fact', content: 'new words' }),
      noContent,
      ok({ documents: [{ document_id: 'd1', hit_count: 3 }], next_page_token: '' }),
    )
    expect((await admin.updateMemoryItem('i1', { content: 'new words' })).content).toBe('new words')
    await admin.deleteMemoryItem('i1')
    expect((await admin.listFrequentDocuments()).items[0].hit_count).toBe(3)
    expect(requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'PATCH /api/v1/memory/items/i1',
      'DELETE /api/v1/memory/items/i1',
      'GET /api/v1/memory/frequent-documents',
    ])
    expect(sent(requests[0].body)).toEqual({ content: 'new words' })
  })
})

describe('field errors', () => {
  it('go to the field the server names, or the nearest one it lies under', () => {
    const fields = ['name', 'tool_names', 'config', 'config.agent_id', 'model_parameters.temperature']
    expect(fieldOf('name', fields)).toBe('name')
    expect(fieldOf('tool_names.2', fields)).toBe('tool_names')
    expect(fieldOf('tool_names[2]', fields)).toBe('tool_names')
    expect(fieldOf('config.agent_id', fields)).toBe('config.agent_id')
    expect(fieldOf('config.routes[1].agent_id', fields)).toBe('config')
    expect(fieldOf('model_parameters.temperature', fields)).toBe('model_parameters.temperature')
    expect(fieldOf('names', fields)).toBeNull()
    expect(fieldOf(undefined, fields)).toBeNull()
  })
})
