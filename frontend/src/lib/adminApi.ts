/**
 * The client of the configuration routes of the gateway (`/api/v1`): models and providers, agents,
 * orchestrators, applications, tools and skills, and the caller's memory — exactly as the gateway's
 * routes answer (services/gateway/src/knowsphere_gateway/api/{models,agents,applications,tools,
 * memory}.py): proto field names, enums as lower-case names, timestamps as RFC 3339 strings.
 *
 * Besides the calls, the drafts the edit forms hold and the one mapping from a draft to a request
 * body. Secrets are write-only everywhere: a model's API key, an external orchestrator's API key and a
 * WeCom channel's token, EncodingAESKey and secret are sent only when typed (an empty field keeps the
 * stored value) and never read back — the API answers a masked hint at most.
 */

import { API_BASE, MAX_PAGES, type ApiClient } from './api'

// --- limits the gateway states (knowsphere_contracts.agents, api/applications.py) -------------------

/** Agent, orchestrator and application names: unique in the tenant, used in routing configuration. */
export const NAME_PATTERN = /^[a-z][a-z0-9_-]{1,63}$/
export const MAX_DISPLAY_NAME_CHARS = 200
export const MAX_DESCRIPTION_CHARS = 2_000
export const MAX_SYSTEM_PROMPT_CHARS = 20_000
export const MAX_MODEL_NAME_CHARS = 300
export const MAX_CHANNEL_SETTING_CHARS = 256
/** An orchestrator's `config`, roughly as the gateway counts it (the encoded size; JSON text is close). */
export const MAX_CONFIG_BYTES = 64 * 1024
export const MAX_TEMPERATURE = 2
export const MIN_RATE_PER_SECOND = 0.001
export const MAX_RATE_PER_SECOND = 10_000
export const MAX_BURST = 100_000
export const MAX_AGENT_HOPS = 20
export const MIN_EXTERNAL_TIMEOUT_SECONDS = 1
export const MAX_EXTERNAL_TIMEOUT_SECONDS = 600

// --- vocabularies ---------------------------------------------------------------------------------

/** What a model can be used for (modelhub's ModelType): chat LLM, vision LLM, embeddings, rerank, ASR. */
export const MODEL_TYPES = ['knowledge_qa', 'vlm', 'embedding', 'rerank', 'asr'] as const
export type ModelType = (typeof MODEL_TYPES)[number]
export type DefaultSource = 'none' | 'tenant' | 'builtin' | 'environment'
export type ConsumerKind = 'knowledge_base' | 'agent'

/** What an agent's model is used for: LLM always, VISION when it reads a message's images itself. */
export type AgentModelType = 'LLM' | 'VISION'

export const ORCHESTRATION_MODES = [
  'single',
  'conditional',
  'knowledge_base',
  'collaboration',
  'supervisor',
  'workflow',
  'external',
  'deep_agent',
] as const
export type OrchestrationMode = (typeof ORCHESTRATION_MODES)[number]
/** Modes whose configuration is edited as JSON: their shapes are graphs and rule lists. */
export const JSON_CONFIG_MODES: readonly OrchestrationMode[] = ['conditional', 'workflow']
export const EXTERNAL_PROVIDERS = ['dify', 'n8n', 'a2a'] as const
export type ExternalProvider = (typeof EXTERNAL_PROVIDERS)[number]
export const COLLABORATION_STRATEGIES = ['sequential', 'parallel'] as const
export type CollaborationStrategy = (typeof COLLABORATION_STRATEGIES)[number]

export const PLATFORMS = ['webclient', 'api_service', 'wework_aibot', 'wework_traditional'] as const
export type Platform = (typeof PLATFORMS)[number]
export const MESSAGE_FORMATS = ['text', 'markdown'] as const
export type MessageFormat = (typeof MESSAGE_FORMATS)[number]
/** A WeCom channel's write-only settings. */
export const CHANNEL_SECRETS = ['token', 'encoding_aes_key', 'secret'] as const
export type ChannelSecret = (typeof CHANNEL_SECRETS)[number]
/** The channel settings each WeCom platform takes (api/applications.py, domain/channel_config.py). */
export const CHANNEL_FIELDS: Record<Platform, readonly string[]> = {
  webclient: [],
  api_service: [],
  wework_traditional: ['corp_id', 'agent_id', 'token', 'encoding_aes_key', 'secret', 'message_format'],
  wework_aibot: ['token', 'encoding_aes_key', 'bot_id'],
}
/** The path of the OpenAI-compatible chat route, where an `api_service` application is named as `model`. */
export const OPENAI_CHAT_PATH = '/v1/chat/completions'

export const MEMORY_KINDS = ['profile', 'interest', 'fact'] as const
export type MemoryKind = (typeof MEMORY_KINDS)[number]

export function isWecom(platform: Platform): boolean {
  return platform === 'wework_aibot' || platform === 'wework_traditional'
}

// --- what the API answers ---------------------------------------------------------------------------

export interface ModelParameters {
  temperature: number | null
  max_tokens: number | null
  context_window: number | null
  embedding_dimension: number | null
  extra: Record<string, unknown> | null
}

export interface Model {
  id: string
  display_name: string
  provider_id: string
  model_name: string
  types: ModelType[]
  base_url: string
  parameters: ModelParameters | null
  /** The stored key masked (`sk-…a1b2`); empty when no key is stored. Never the key. */
  api_key_hint: string
  builtin: boolean
  tenant_id: string
  default_for: ModelType[]
  create_time: string | null
  update_time: string | null
  description: string
}

export interface ProviderCapabilities {
  model_types: ModelType[]
  local: boolean
  requires_api_key: boolean
  openai_compatible: boolean
  tool_calls: boolean
}

export interface Provider {
  id: string
  display_name: string
  default_base_url: string
  capabilities: ProviderCapabilities | null
  docs_url: string
}

export interface ResolvedDefault {
  type: ModelType | null
  model: Model | null
  source: DefaultSource | null
}

export interface ModelUsage {
  model_id: string
  consumer_kind: ConsumerKind | null
  consumer_id: string
  consumer_name: string
  create_time: string | null
}

export interface Agent {
  id: string
  name: string
  display_name: string
  description: string
  system_prompt: string
  model_id: string
  model_parameters: { temperature: number | null; max_tokens: number | null } | null
  tool_names: string[]
  knowledge_base_ids: string[]
  skill_names: string[]
  active: boolean
  create_time: string | null
  update_time: string | null
  model_types: string[]
}

export interface Orchestrator {
  id: string
  name: string
  display_name: string
  description: string
  mode: OrchestrationMode | null
  /** Every agent it runs: those its config names, then any further ones. */
  member_agent_ids: string[]
  /** The mode's configuration; an external one carries `api_key_hint`, never the key. */
  config: Record<string, unknown>
  active: boolean
  create_time: string | null
  update_time: string | null
}

export interface Application {
  id: string
  name: string
  display_name: string
  platform: Platform
  orchestrator_id: string
  active: boolean
  rate_limit_per_second: number
  rate_limit_burst: number
  tenant_id: string
  created_by: string
  create_time: string
  update_time: string
  /** The channel's plain settings (WeCom: corp_id, agent_id, message_format, bot_id). */
  platform_config: Record<string, string | number>
  /** The channel's write-only settings by name, each a masked hint. */
  platform_secrets: Record<string, string>
  /** WeCom platforms: the path of the callback URL to give WeCom's console; null otherwise. */
  callback_path: string | null
}

export interface Tool {
  name: string
  display_name: string
  description: string
  parameters_json_schema: string
  category: 'planning' | 'knowledge_base' | 'web' | 'generation' | 'runtime' | null
  selectable: boolean
  produces_sources: boolean
}

export interface Skill {
  name: string
  description: string
  instructions_path: string
  has_scripts: boolean
  file_count: number
  update_time: string | null
}

export interface SkillFile {
  path: string
  size_bytes: number
  script: boolean
}

export interface SkillDetail {
  skill: Skill | null
  instructions: string
  files: SkillFile[]
}

/** One file of a skill: its text when it is text, else only what it is. */
export interface SkillFileContent {
  contentType: string
  text: string | null
  /** Cut at the tool runner's size cap. */
  truncated: boolean
}

export interface MemoryItem {
  id: string
  kind: MemoryKind | null
  content: string
  source_session_id: string
  source_message_id: string
  create_time: string | null
}

export interface FrequentDocument {
  document_id: string
  knowledge_base_id: string
  file_name: string
  hit_count: number
  last_cited_time: string | null
}

/** One page of a list and the token of the next (empty on the last page). */
export interface Page<T> {
  items: T[]
  nextPageToken: string
}

// --- request bodies ---------------------------------------------------------------------------------

export interface ModelParametersBody {
  temperature?: number
  max_tokens?: number
  context_window?: number
  embedding_dimension?: number
  extra?: Record<string, unknown>
}

export interface ModelCreate {
  display_name: string
  provider_id: string
  model_name: string
  types: ModelType[]
  base_url?: string
  description?: string
  parameters?: ModelParametersBody
  api_key?: string
}

/** Only the fields given change; `parameters` and `types` replace the whole set; `api_key: ""` removes
 * the stored key, no `api_key` keeps it. The provider cannot change. */
export type ModelUpdate = Partial<Omit<ModelCreate, 'provider_id'>>

export interface AgentBody {
  name: string
  display_name: string
  description: string
  system_prompt: string
  model_id: string
  model_parameters?: { temperature?: number; max_tokens?: number }
  tool_names: string[]
  knowledge_base_ids: string[]
  skill_names: string[]
  model_types: AgentModelType[]
  active: boolean
}

export interface OrchestratorBody {
  name: string
  display_name: string
  description: string
  mode: OrchestrationMode
  member_agent_ids: string[]
  config: Record<string, unknown>
  active: boolean
}

export interface ApplicationBody {
  name?: string
  display_name?: string
  platform?: Platform
  platform_config?: Record<string, string | number>
  orchestrator_id?: string
  active?: boolean
  rate_limit_per_second?: number
  rate_limit_burst?: number
}

// --- the client -----------------------------------------------------------------------------------

type Query = Record<string, string | number | boolean | string[] | undefined>

export class AdminApi {
  constructor(private readonly api: ApiClient) {}

  // --- models ---

  listProviders(signal?: AbortSignal): Promise<Provider[]> {
    return this.api
      .json<{ providers?: Provider[] }>('GET', `${API_BASE}/providers`, { signal })
      .then((answer) => answer.providers ?? [])
  }

  /** Built-in models first, then the tenant's; of one type when given. */
  listModels(type?: ModelType, signal?: AbortSignal): Promise<Model[]> {
    return this.everyPage<Model>(`${API_BASE}/models`, 'models', { type }, signal)
  }

  getModel(id: string, signal?: AbortSignal): Promise<Model> {
    return this.api.json('GET', `${API_BASE}/models/${enc(id)}`, { signal })
  }

  createModel(body: ModelCreate): Promise<Model> {
    return this.api.json('POST', `${API_BASE}/models`, { json: body })
  }

  updateModel(id: string, body: ModelUpdate): Promise<Model> {
    return this.api.json('PATCH', `${API_BASE}/models/${enc(id)}`, { json: body })
  }

  deleteModel(id: string): Promise<void> {
    return this.api.json('DELETE', `${API_BASE}/models/${enc(id)}`)
  }

  /** The model a call of `type` uses without an explicit one, and where that choice comes from. */
  getDefaultModel(type: ModelType, signal?: AbortSignal): Promise<ResolvedDefault> {
    return this.api.json('GET', `${API_BASE}/models/defaults/${enc(type)}`, { signal })
  }

  setDefaultModel(type: ModelType, modelId: string): Promise<ResolvedDefault> {
    return this.api.json('PUT', `${API_BASE}/models/defaults/${enc(type)}`, { json: { model_id: modelId } })
  }

  /** What uses a model (knowledge bases, agents): a model in use cannot be deleted. */
  listModelUsages(id: string, signal?: AbortSignal): Promise<ModelUsage[]> {
    return this.api
      .json<{ usages?: ModelUsage[] }>('GET', `${API_BASE}/models/${enc(id)}/usages`, { signal })
      .then((answer) => answer.usages ?? [])
  }

  // --- agents ---

  listAgents(signal?: AbortSignal): Promise<Agent[]> {
    return this.everyPage<Agent>(`${API_BASE}/agents`, 'agents', {}, signal)
  }

  getAgent(id: string, signal?: AbortSignal): Promise<Agent> {
    return this.api.json('GET', `${API_BASE}/agents/${enc(id)}`, { signal })
  }

  createAgent(body: AgentBody): Promise<Agent> {
    return this.api.json('POST', `${API_BASE}/agents`, { json: body })
  }

  updateAgent(id: string, body: AgentBody): Promise<Agent> {
    return this.api.json('PATCH', `${API_BASE}/agents/${enc(id)}`, { json: body })
  }

  /** Refused (409, naming them) while an orchestrator runs the agent. */
  deleteAgent(id: string): Promise<void> {
    return this.api.json('DELETE', `${API_BASE}/agents/${enc(id)}`)
  }

  // --- orchestrators ---

  listOrchestrators(signal?: AbortSignal): Promise<Orchestrator[]> {
    return this.everyPage<Orchestrator>(`${API_BASE}/orchestrators`, 'orchestrators', {}, signal)
  }

  getOrchestrator(id: string, signal?: AbortSignal): Promise<Orchestrator> {
    return this.api.json('GET', `${API_BASE}/orchestrators/${enc(id)}`, { signal })
  }

  createOrchestrator(body: OrchestratorBody): Promise<Orchestrator> {
    return this.api.json('POST', `${API_BASE}/orchestrators`, { json: body })
  }

  updateOrchestrator(id: string, body: OrchestratorBody): Promise<Orchestrator> {
    return this.api.json('PATCH', `${API_BASE}/orchestrators/${enc(id)}`, { json: body })
  }

  deleteOrchestrator(id: string): Promise<void> {
    return this.api.json('DELETE', `${API_BASE}/orchestrators/${enc(id)}`)
  }

  // --- applications (one list, not paged) ---

  listApplications(signal?: AbortSignal): Promise<Application[]> {
    return this.api
      .json<{ applications?: Application[] }>('GET', `${API_BASE}/applications`, { signal })
      .then((answer) => answer.applications ?? [])
  }

  getApplication(id: string, signal?: AbortSignal): Promise<Application> {
    return this.api.json('GET', `${API_BASE}/applications/${enc(id)}`, { signal })
  }

  createApplication(body: ApplicationBody): Promise<Application> {
    return this.api.json('POST', `${API_BASE}/applications`, { json: body })
  }

  updateApplication(id: string, body: ApplicationBody): Promise<Application> {
    return this.api.json('PATCH', `${API_BASE}/applications/${enc(id)}`, { json: body })
  }

  /** Deletes the application and revokes its tokens. */
  deleteApplication(id: string): Promise<void> {
    return this.api.json('DELETE', `${API_BASE}/applications/${enc(id)}`)
  }

  // --- tools and skills (read only: the API has no route that installs or changes a skill) ---

  /** The tool catalogue in its stable order (every tool; the agent editor offers the selectable ones). */
  listTools(signal?: AbortSignal): Promise<Tool[]> {
    return this.api
      .json<{ tools?: Tool[] }>('GET', `${API_BASE}/tools`, { signal })
      .then((answer) => answer.tools ?? [])
  }

  listSkills(signal?: AbortSignal): Promise<Skill[]> {
    return this.everyPage<Skill>(`${API_BASE}/skills`, 'skills', {}, signal)
  }

  getSkill(name: string, signal?: AbortSignal): Promise<SkillDetail> {
    return this.api.json('GET', `${API_BASE}/skills/${enc(name)}`, { signal })
  }

  /** One file of a skill; its text only when the gateway says it is text. */
  async readSkillFile(name: string, path: string, signal?: AbortSignal): Promise<SkillFileContent> {
    const response = await this.api.ok('GET', `${API_BASE}/skills/${enc(name)}/file`, { query: { path }, signal })
    const contentType = response.headers.get('content-type') ?? ''
    const truncated = response.headers.get('x-ks-truncated') === 'true'
    const text = isText(contentType) ? await response.text() : null
    return { contentType, text, truncated }
  }

  // --- the caller's memory ---

  /** One page of what is remembered about the caller, newest first; only `kinds` when given. */
  listMemoryItems(kinds: MemoryKind[] = [], pageToken = '', signal?: AbortSignal): Promise<Page<MemoryItem>> {
    return this.page<MemoryItem>(`${API_BASE}/memory/items`, 'items', { kind: kinds.length ? kinds : undefined }, pageToken, signal)
  }

  updateMemoryItem(id: string, change: { content?: string; kind?: MemoryKind }): Promise<MemoryItem> {
    return this.api.json('PATCH', `${API_BASE}/memory/items/${enc(id)}`, { json: change })
  }

  /** Forgets an item for good. */
  deleteMemoryItem(id: string): Promise<void> {
    return this.api.json('DELETE', `${API_BASE}/memory/items/${enc(id)}`)
  }

  /** One page of the documents the caller's answers cited most, most cited first. */
  listFrequentDocuments(pageToken = '', signal?: AbortSignal): Promise<Page<FrequentDocument>> {
    return this.page<FrequentDocument>(`${API_BASE}/memory/frequent-documents`, 'documents', {}, pageToken, signal)
  }

  // --- paging ---

  /** One page of a list answered as `{<key>: [...], next_page_token}`. */
  private async page<T>(path: string, key: string, query: Query, pageToken: string, signal?: AbortSignal): Promise<Page<T>> {
    const answer = await this.api.json<Record<string, unknown>>('GET', path, {
      query: { ...query, page_token: pageToken || undefined },
      signal,
    })
    return {
      items: (answer[key] as T[] | undefined) ?? [],
      nextPageToken: (answer.next_page_token as string | undefined) ?? '',
    }
  }

  /** Every item of a paged list (up to {@link MAX_PAGES} pages). */
  private async everyPage<T>(path: string, key: string, query: Query, signal?: AbortSignal): Promise<T[]> {
    const items: T[] = []
    let token = ''
    for (let n = 0; n < MAX_PAGES; n++) {
      const page = await this.page<T>(path, key, query, token, signal)
      items.push(...page.items)
      token = page.nextPageToken
      if (!token) break
    }
    return items
  }
}

function enc(id: string): string {
  return encodeURIComponent(id)
}

function isText(contentType: string): boolean {
  return /^text\/|[/+](json|xml|yaml|x-yaml|javascript|x-sh|x-python)\b/i.test(contentType)
}

// --- drafts: what the forms hold, and their request bodies -------------------------------------------

/**
 * What a write-only field sends: nothing when left empty (the stored value stays), `""` when the stored
 * value is to be removed, else the value typed (without surrounding spaces).
 */
export function secretChange(typed: string, remove = false): string | undefined {
  if (remove) return ''
  const value = typed.trim()
  return value === '' ? undefined : value
}

/** `value` without the keys whose value is undefined, null or `""` (JSON leaves out undefined anyway). */
function given<T extends object>(value: T): { [K in keyof T]?: Exclude<T[K], null> } {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null && v !== '')) as {
    [K in keyof T]?: Exclude<T[K], null>
  }
}

export interface ModelDraft {
  display_name: string
  provider_id: string
  model_name: string
  types: ModelType[]
  base_url: string
  description: string
  temperature: number | null
  max_tokens: number | null
  context_window: number | null
  embedding_dimension: number | null
  /** Provider-specific request parameters (a JSON object). */
  extra: Record<string, unknown> | null
  /** Typed in a password field; empty keeps the stored key. */
  api_key: string
  remove_api_key: boolean
}

export function modelDraft(model?: Partial<Model>): ModelDraft {
  const parameters = model?.parameters ?? null
  return {
    display_name: model?.display_name ?? '',
    provider_id: model?.provider_id ?? '',
    model_name: model?.model_name ?? '',
    types: [...(model?.types ?? [])],
    base_url: model?.base_url ?? '',
    description: model?.description ?? '',
    temperature: parameters?.temperature ?? null,
    max_tokens: parameters?.max_tokens ?? null,
    context_window: parameters?.context_window ?? null,
    embedding_dimension: parameters?.embedding_dimension ?? null,
    extra: parameters?.extra ?? null,
    api_key: '',
    remove_api_key: false,
  }
}

function modelParameters(draft: ModelDraft): ModelParametersBody {
  const { temperature, max_tokens, context_window, embedding_dimension } = draft
  const extra = draft.extra && Object.keys(draft.extra).length > 0 ? draft.extra : undefined
  return given({ temperature, max_tokens, context_window, embedding_dimension, extra }) as ModelParametersBody
}

export function modelCreateBody(draft: ModelDraft): ModelCreate {
  const parameters = modelParameters(draft)
  return {
    display_name: draft.display_name.trim(),
    provider_id: draft.provider_id,
    model_name: draft.model_name.trim(),
    types: draft.types,
    base_url: draft.base_url.trim(),
    description: draft.description.trim(),
    ...(Object.keys(parameters).length ? { parameters } : {}),
    ...given({ api_key: secretChange(draft.api_key) }),
  }
}

/** The change of a stored model: every field of the form (the parameters replace the stored set), and
 * the key only when one was typed or its removal asked for. */
export function modelUpdateBody(draft: ModelDraft): ModelUpdate {
  const body: ModelUpdate = {
    display_name: draft.display_name.trim(),
    model_name: draft.model_name.trim(),
    types: draft.types,
    base_url: draft.base_url.trim(),
    description: draft.description.trim(),
    parameters: modelParameters(draft),
  }
  const key = secretChange(draft.api_key, draft.remove_api_key)
  if (key !== undefined) body.api_key = key
  return body
}

export interface AgentDraft {
  name: string
  display_name: string
  description: string
  system_prompt: string
  /** Empty: the tenant's default chat model. */
  model_id: string
  temperature: number | null
  max_tokens: number | null
  tool_names: string[]
  knowledge_base_ids: string[]
  skill_names: string[]
  /** Reads a message's images itself (model type VISION; its model must be a VLM model). */
  vision: boolean
  active: boolean
}

export function agentDraft(agent?: Partial<Agent>): AgentDraft {
  return {
    name: agent?.name ?? '',
    display_name: agent?.display_name ?? '',
    description: agent?.description ?? '',
    system_prompt: agent?.system_prompt ?? '',
    model_id: agent?.model_id ?? '',
    temperature: agent?.model_parameters?.temperature ?? null,
    max_tokens: agent?.model_parameters?.max_tokens ?? null,
    tool_names: [...(agent?.tool_names ?? [])],
    knowledge_base_ids: [...(agent?.knowledge_base_ids ?? [])],
    skill_names: [...(agent?.skill_names ?? [])],
    vision: (agent?.model_types ?? []).includes('VISION'),
    active: agent?.active ?? true,
  }
}

/** The body of a new agent, or of a change that sets every field (lists and parameters replace the
 * stored ones: overrides left empty are cleared). */
export function agentBody(draft: AgentDraft, change = false): AgentBody {
  const overrides = given({ temperature: draft.temperature, max_tokens: draft.max_tokens }) as AgentBody['model_parameters']
  const body: AgentBody = {
    name: draft.name.trim(),
    display_name: draft.display_name.trim(),
    description: draft.description.trim(),
    system_prompt: draft.system_prompt,
    model_id: draft.model_id,
    tool_names: draft.tool_names,
    knowledge_base_ids: draft.knowledge_base_ids,
    skill_names: draft.skill_names,
    model_types: draft.vision ? ['LLM', 'VISION'] : ['LLM'],
    active: draft.active,
  }
  if (change || Object.keys(overrides ?? {}).length) body.model_parameters = overrides
  return body
}

export interface OrchestratorDraft {
  name: string
  display_name: string
  description: string
  mode: OrchestrationMode
  active: boolean
  /** Agents run besides those the configuration names. */
  extra_member_ids: string[]
  // single, deep_agent, knowledge_base (optional there)
  agent_id: string
  // supervisor
  supervisor_agent_id: string
  worker_agent_ids: string[]
  enable_summarization: boolean
  max_hops: number | null
  // collaboration
  agent_ids: string[]
  collaboration_strategy: CollaborationStrategy
  summary_agent_id: string
  // knowledge_base
  knowledge_base_ids: string[]
  knowledge_graph: boolean
  // external
  provider: ExternalProvider
  base_url: string
  auth_header: string
  timeout_seconds: number | null
  api_key: string
  remove_api_key: boolean
  /** The stored key masked; empty when none is stored. */
  api_key_hint: string
  // conditional, workflow
  config_json: string
}

const str = (value: unknown): string => (typeof value === 'string' ? value : '')
const strings = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [])
const num = (value: unknown): number | null => (typeof value === 'number' ? value : null)

/** Every agent id a configuration names (under a key `agent_id`, `*_agent_id` or `*agent_ids`). */
export function configAgentIds(config: unknown): string[] {
  const found: string[] = []
  const visit = (value: unknown, key = '') => {
    if (Array.isArray(value)) value.forEach((item) => visit(item, key))
    else if (value && typeof value === 'object') Object.entries(value).forEach(([k, v]) => visit(v, k))
    else if (typeof value === 'string' && value && /agent_ids?$/.test(key) && !found.includes(value)) found.push(value)
  }
  visit(config)
  return found
}

/** A configuration to start a JSON-edited mode from, naming `agentId` where an agent goes. */
export function configTemplate(mode: OrchestrationMode, agentId = ''): Record<string, unknown> {
  if (mode === 'conditional') {
    return { routes: [{ condition: { keywords: ['invoice'] }, agent_id: agentId }], default_agent_id: agentId }
  }
  if (mode === 'workflow') {
    return {
      steps: [
        {
          id: 'answer',
          kind: 'agent',
          agent_id: agentId,
          inputs: { question: { from: 'turn.question' } },
          outputs: { answer: 'text' },
        },
      ],
    }
  }
  return {}
}

export function orchestratorDraft(orchestrator?: Partial<Orchestrator>): OrchestratorDraft {
  const mode = orchestrator?.mode ?? 'single'
  const config = orchestrator?.config ?? {}
  const { api_key_hint: hint, ...editable } = config
  const named = configAgentIds(config)
  const strategy = str(config.collaboration_strategy)
  const provider = str(config.provider)
  return {
    name: orchestrator?.name ?? '',
    display_name: orchestrator?.display_name ?? '',
    description: orchestrator?.description ?? '',
    mode,
    active: orchestrator?.active ?? true,
    extra_member_ids: (orchestrator?.member_agent_ids ?? []).filter((id) => !named.includes(id)),
    agent_id: str(config.agent_id),
    supervisor_agent_id: str(config.supervisor_agent_id),
    worker_agent_ids: strings(config.worker_agent_ids),
    enable_summarization: config.enable_summarization === true,
    max_hops: num(config.max_hops),
    agent_ids: strings(config.agent_ids),
    collaboration_strategy: (COLLABORATION_STRATEGIES as readonly string[]).includes(strategy) ? (strategy as CollaborationStrategy) : 'sequential',
    summary_agent_id: str(config.summary_agent_id),
    knowledge_base_ids: strings(config.knowledge_base_ids),
    knowledge_graph: config.knowledge_graph === true,
    provider: (EXTERNAL_PROVIDERS as readonly string[]).includes(provider) ? (provider as ExternalProvider) : 'dify',
    base_url: str(config.base_url),
    auth_header: str(config.auth_header),
    timeout_seconds: num(config.timeout_seconds),
    api_key: '',
    remove_api_key: false,
    api_key_hint: str(hint),
    config_json: JSON_CONFIG_MODES.includes(mode) ? JSON.stringify(editable, null, 2) : '',
  }
}

/** Why a text is no JSON object: `syntax` (with the parser's words) or `not_object`. */
export type JsonProblem = { problem: 'syntax'; detail: string } | { problem: 'not_object' } | { problem: 'too_large' }

/** The JSON object `text` holds, or what is wrong with it. */
export function parseJsonObject(text: string, maxBytes = Infinity): { value: Record<string, unknown> } | JsonProblem {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { problem: 'syntax', detail: error instanceof Error ? error.message : String(error) }
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return { problem: 'not_object' }
  if (new TextEncoder().encode(JSON.stringify(value)).length > maxBytes) return { problem: 'too_large' }
  return { value: value as Record<string, unknown> }
}

/** The configuration of the draft's mode, or why its JSON cannot be sent. */
export function orchestratorConfig(draft: OrchestratorDraft): { value: Record<string, unknown> } | JsonProblem {
  switch (draft.mode) {
    case 'single':
      return { value: { agent_id: draft.agent_id } }
    case 'deep_agent':
      return { value: { agent_id: draft.agent_id, backend: 'sandbox' } }
    case 'knowledge_base':
      return {
        value: given({ knowledge_base_ids: draft.knowledge_base_ids, agent_id: draft.agent_id, knowledge_graph: draft.knowledge_graph }),
      }
    case 'supervisor':
      return {
        value: given({
          supervisor_agent_id: draft.supervisor_agent_id,
          worker_agent_ids: draft.worker_agent_ids,
          enable_summarization: draft.enable_summarization,
          max_hops: draft.max_hops,
        }),
      }
    case 'collaboration':
      return {
        value: given({
          agent_ids: draft.agent_ids,
          collaboration_strategy: draft.collaboration_strategy,
          summary_agent_id: draft.summary_agent_id,
        }),
      }
    case 'external': {
      const value: Record<string, unknown> = given({
        provider: draft.provider,
        base_url: draft.base_url.trim(),
        // Only an n8n webhook takes its key in a header of its choice.
        auth_header: draft.provider === 'n8n' ? draft.auth_header.trim() : '',
        timeout_seconds: draft.timeout_seconds,
      })
      // No api_key keeps the stored key; "" removes it.
      const key = secretChange(draft.api_key, draft.remove_api_key)
      if (key !== undefined) value.api_key = key
      return { value }
    }
    default:
      return parseJsonObject(draft.config_json, MAX_CONFIG_BYTES)
  }
}

/** The body of a new orchestrator or of a change (which replaces the configuration and the members). */
export function orchestratorBody(draft: OrchestratorDraft): { value: OrchestratorBody } | JsonProblem {
  const config = orchestratorConfig(draft)
  if (!('value' in config)) return config
  return {
    value: {
      name: draft.name.trim(),
      display_name: draft.display_name.trim(),
      description: draft.description.trim(),
      mode: draft.mode,
      member_agent_ids: draft.extra_member_ids,
      config: config.value,
      active: draft.active,
    },
  }
}

export interface ApplicationDraft {
  name: string
  display_name: string
  platform: Platform
  orchestrator_id: string
  active: boolean
  /** Empty on a new application: the gateway's per-caller rate applies. */
  rate_limit_per_second: number | null
  rate_limit_burst: number | null
  // WeCom channel settings
  corp_id: string
  agent_id: number | null
  message_format: MessageFormat
  bot_id: string
  /** Typed in password fields; an empty one keeps the stored secret. */
  secrets: Record<ChannelSecret, string>
}

export function applicationDraft(application?: Partial<Application>): ApplicationDraft {
  const config = application?.platform_config ?? {}
  const format = str(config.message_format)
  return {
    name: application?.name ?? '',
    display_name: application?.display_name ?? '',
    platform: application?.platform ?? 'webclient',
    orchestrator_id: application?.orchestrator_id ?? '',
    active: application?.active ?? true,
    rate_limit_per_second: application?.rate_limit_per_second ?? null,
    rate_limit_burst: application?.rate_limit_burst ?? null,
    corp_id: str(config.corp_id),
    agent_id: num(config.agent_id),
    message_format: (MESSAGE_FORMATS as readonly string[]).includes(format) ? (format as MessageFormat) : 'text',
    bot_id: str(config.bot_id),
    secrets: { token: '', encoding_aes_key: '', secret: '' },
  }
}

/** The channel settings of the draft's platform that are given (secrets only when typed). */
function channelSettings(draft: ApplicationDraft): Record<string, string | number> {
  const fields = CHANNEL_FIELDS[draft.platform]
  const values: Record<string, string | number | null | undefined> = {
    corp_id: draft.corp_id.trim(),
    agent_id: draft.agent_id,
    message_format: draft.message_format,
    bot_id: draft.bot_id.trim(),
    token: secretChange(draft.secrets.token),
    encoding_aes_key: secretChange(draft.secrets.encoding_aes_key),
    secret: secretChange(draft.secrets.secret),
  }
  return given(Object.fromEntries(fields.map((field) => [field, values[field]]))) as Record<string, string | number>
}

/** The body of a new application, or of a change of `current` (the channel settings given replace
 * those stored; secrets left empty stay). */
export function applicationBody(draft: ApplicationDraft, current?: Application): ApplicationBody {
  const body: ApplicationBody = {
    name: draft.name.trim(),
    display_name: draft.display_name.trim(),
    platform: draft.platform,
    orchestrator_id: draft.orchestrator_id,
    active: draft.active,
    ...given({ rate_limit_per_second: draft.rate_limit_per_second, rate_limit_burst: draft.rate_limit_burst }),
  }
  if (isWecom(draft.platform)) {
    const settings = channelSettings(draft)
    if (!current || Object.keys(settings).length > 0 || current.platform !== draft.platform) body.platform_config = settings
  }
  return body
}

/**
 * The form field a server's error names (`error.field`), among `fields`: the field itself or the
 * nearest one it lies under (`tool_names.2` → `tool_names`, `config.routes[0].agent_id` → `config`);
 * null when it names none of them.
 */
export function fieldOf(field: string | undefined, fields: readonly string[]): string | null {
  if (!field) return null
  let best: string | null = null
  for (const candidate of fields) {
    const under = field === candidate || field.startsWith(`${candidate}.`) || field.startsWith(`${candidate}[`)
    if (under && (!best || candidate.length > best.length)) best = candidate
  }
  return best
}
