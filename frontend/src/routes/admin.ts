/** The pages that configure what answers: agents, orchestrators, applications, skills, models, memory. */

import type { RouteRecordRaw } from 'vue-router'

const AgentEditView = () => import('../views/admin/AgentEditView.vue')
const OrchestratorEditView = () => import('../views/admin/OrchestratorEditView.vue')
const ApplicationEditView = () => import('../views/admin/ApplicationEditView.vue')
const ModelEditView = () => import('../views/admin/ModelEditView.vue')

export const adminRoutes: RouteRecordRaw[] = [
  {
    path: '/agents',
    name: 'agents',
    component: () => import('../views/admin/AgentsView.vue'),
    meta: { title: 'admin.agents.title', nav: 'admin.nav.agents', navOrder: 40 },
  },
  { path: '/agents/new', name: 'agent-new', component: AgentEditView, meta: { title: 'admin.agents.title' } },
  { path: '/agents/:agentId', name: 'agent', component: AgentEditView, props: true, meta: { title: 'admin.agents.title' } },
  {
    path: '/orchestrators',
    name: 'orchestrators',
    component: () => import('../views/admin/OrchestratorsView.vue'),
    meta: { title: 'admin.orchestrators.title', nav: 'admin.nav.orchestrators', navOrder: 50 },
  },
  {
    path: '/orchestrators/new',
    name: 'orchestrator-new',
    component: OrchestratorEditView,
    meta: { title: 'admin.orchestrators.title' },
  },
  {
    path: '/orchestrators/:orchestratorId',
    name: 'orchestrator',
    component: OrchestratorEditView,
    props: true,
    meta: { title: 'admin.orchestrators.title' },
  },
  {
    path: '/applications',
    name: 'applications',
    component: () => import('../views/admin/ApplicationsView.vue'),
    meta: { title: 'admin.applications.title', nav: 'admin.nav.applications', navOrder: 60 },
  },
  {
    path: '/applications/new',
    name: 'application-new',
    component: ApplicationEditView,
    meta: { title: 'admin.applications.title' },
  },
  {
    path: '/applications/:applicationId',
    name: 'application',
    component: ApplicationEditView,
    props: true,
    meta: { title: 'admin.applications.title' },
  },
  {
    path: '/skills',
    name: 'skills',
    component: () => import('../views/admin/SkillsView.vue'),
    meta: { title: 'admin.skills.title', nav: 'admin.nav.skills', navOrder: 70 },
  },
  {
    path: '/skills/:skillName',
    name: 'skill',
    component: () => import('../views/admin/SkillView.vue'),
    props: true,
    meta: { title: 'admin.skills.title' },
  },
  {
    path: '/models',
    name: 'models',
    component: () => import('../views/admin/ModelsView.vue'),
    meta: { title: 'admin.models.title', nav: 'admin.nav.models', navOrder: 80 },
  },
  { path: '/models/new', name: 'model-new', component: ModelEditView, meta: { title: 'admin.models.title' } },
  { path: '/models/:modelId', name: 'model', component: ModelEditView, props: true, meta: { title: 'admin.models.title' } },
  {
    path: '/memory',
    name: 'memory',
    component: () => import('../views/admin/MemoryView.vue'),
    meta: { title: 'admin.memory.title', nav: 'admin.nav.memory', navOrder: 90 },
  },
]
