/** The app's pages, each loaded when first visited; every page but the login needs credentials. */

import { createRouter, createWebHistory, type RouterHistory } from 'vue-router'

import { api, session, signOut } from './client'
import { i18n } from './i18n'
import { adminRoutes } from './routes/admin'
import { evaluationRoutes } from './routes/evaluation'

declare module 'vue-router' {
  interface RouteMeta {
    public?: boolean
    /** The message key of the page's title. */
    title?: string
    /** The message key of the page's entry in the main navigation; pages without one are not listed. */
    nav?: string
    /** Where the entry sits in the navigation (ascending). */
    navOrder?: number
  }
}

export function createAppRouter(history: RouterHistory = createWebHistory(import.meta.env.BASE_URL)) {
  const router = createRouter({
    history,
    routes: [
      { path: '/', redirect: { name: 'chat' } },
      {
        path: '/login',
        name: 'login',
        component: () => import('./views/LoginView.vue'),
        meta: { public: true, title: 'login.title' },
      },
      {
        path: '/chat/:sessionId?',
        name: 'chat',
        component: () => import('./views/ChatView.vue'),
        props: true,
        meta: { title: 'chat.title', nav: 'app.nav.chat', navOrder: 10 },
      },
      {
        path: '/knowledge',
        name: 'knowledge',
        component: () => import('./views/KnowledgeListView.vue'),
        meta: { title: 'kb.title', nav: 'app.nav.knowledge', navOrder: 20 },
      },
      {
        path: '/knowledge/:kbId',
        name: 'knowledge-base',
        component: () => import('./views/KnowledgeBaseView.vue'),
        props: true,
        meta: { title: 'kb.title' },
      },
      ...evaluationRoutes,
      ...adminRoutes,
      { path: '/:unknown(.*)*', redirect: { name: 'chat' } },
    ],
  })

  router.beforeEach((to) => {
    if (!to.meta.public && !session.credentials) {
      return { name: 'login', query: to.fullPath !== '/' ? { redirect: to.fullPath } : {} }
    }
    return true
  })

  router.afterEach((to) => {
    if (typeof document === 'undefined') return
    const { t } = i18n.global
    document.title = to.meta.title ? `${t(to.meta.title)} · ${t('app.name')}` : t('app.name')
  })

  // A token revoked or expired while in use: back to the login page, saying why.
  api.onUnauthorized((error) => {
    signOut(error.message)
    const current = router.currentRoute.value
    if (!current.meta.public) void router.replace({ name: 'login', query: { redirect: current.fullPath } })
  })

  return router
}
