/** The pages that measure retrieval: retrieval testing on a knowledge base, and evaluation runs.
 *
 * None has an entry in the main navigation: each belongs to a knowledge base (its page links to them),
 * and a run or a comparison is reached from the knowledge base's list of runs. */

import type { RouteRecordRaw } from 'vue-router'

export const evaluationRoutes: RouteRecordRaw[] = [
  {
    path: '/knowledge/:kbId/search',
    name: 'knowledge-search',
    component: () => import('../views/evaluation/SearchView.vue'),
    props: true,
    meta: { title: 'retrieval.title' },
  },
  {
    path: '/knowledge/:kbId/evaluations',
    name: 'evaluations',
    component: () => import('../views/evaluation/EvaluationListView.vue'),
    props: true,
    meta: { title: 'evaluation.title' },
  },
  // Before /evaluations/:evaluationId, which "compare" would otherwise match as an id.
  {
    path: '/evaluations/compare',
    name: 'evaluation-compare',
    component: () => import('../views/evaluation/EvaluationCompareView.vue'),
    meta: { title: 'evaluation.compare.title' },
  },
  {
    path: '/evaluations/:evaluationId',
    name: 'evaluation',
    component: () => import('../views/evaluation/EvaluationRunView.vue'),
    props: true,
    meta: { title: 'evaluation.run.title' },
  },
]
