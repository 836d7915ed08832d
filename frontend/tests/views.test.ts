/**
 * The views rendered on the server side of Vue (no browser, no DOM): each page renders in both
 * languages without an error and without a message key missing, and the answer text renders its
 * citations as buttons.
 */
import { setup as collectStyles } from '@css-render/vue3-ssr'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { createSSRApp, h } from 'vue'
import { renderToString } from 'vue/server-renderer'
import { createMemoryHistory } from 'vue-router'

import App from '../src/App.vue'
import AnswerText from '../src/components/AnswerText.vue'
import { session } from '../src/client'
import { i18n, LOCALES, type Locale } from '../src/i18n'
import { sourceFromJson, type Source } from '../src/lib/citations'
import admin from '../src/locales/admin'
import en from '../src/locales/en'
import evaluation from '../src/locales/evaluation'
import zh from '../src/locales/zh'
import { createAppRouter } from '../src/router'
import { jsonResponse } from './fakeFetch'

const missing: string[] = []

beforeEach(() => {
  missing.length = 0
  i18n.global.setMissingHandler((locale, key) => {
    missing.push(`${locale}:${key}`)
    return key
  })
  // Every call the pages make on setup answers an empty list.
  vi.stubGlobal('fetch', async () =>
    jsonResponse(200, { sessions: [], knowledge_bases: [], documents: [], messages: [], next_page_token: '' }),
  )
})

afterEach(() => {
  vi.unstubAllGlobals()
  session.credentials = null
})

async function render(path: string, locale: Locale): Promise<string> {
  i18n.global.locale.value = locale
  const router = createAppRouter(createMemoryHistory('/ui/'))
  const app = createSSRApp(App).use(i18n).use(router)
  collectStyles(app) // Naive UI's styles go to a collector instead of a document
  await router.push(path)
  await router.isReady()
  return renderToString(app)
}

function keys(messages: object, prefix = ''): string[] {
  return Object.entries(messages).flatMap(([key, value]) =>
    typeof value === 'object' ? keys(value as object, `${prefix}${key}.`) : [`${prefix}${key}`],
  )
}

describe('messages', () => {
  it('have the same keys in every language', () => {
    expect(keys(zh).sort()).toEqual(keys(en).sort())
    expect(keys(admin.zh).sort()).toEqual(keys(admin.en).sort())
    expect(keys(evaluation.zh).sort()).toEqual(keys(evaluation.en).sort())
  })

  it('of every area have names of their own', () => {
    const base = new Set(Object.keys(en))
    for (const area of [admin.en, evaluation.en]) {
      for (const key of Object.keys(area)) expect(base.has(key), `top-level key ${key} is taken`).toBe(false)
    }
  })
})

describe('pages', () => {
  for (const locale of LOCALES) {
    it(`send a visitor without credentials to the login page (${locale})`, async () => {
      const html = await render('/knowledge', locale)
      expect(html).toContain('id="login-token"')
      expect(html).toContain(locale === 'zh' ? 'API 令牌' : 'API token')
      expect(missing).toEqual([])
    })

    // Every page of the router, a parameter filled with a made-up id.
    const paths = createAppRouter(createMemoryHistory('/ui/'))
      .getRoutes()
      .filter((route) => !route.meta.public && !route.redirect && !route.path.includes('(.*)'))
      .map((route) => route.path.replace(/:(\w+)\??/g, (_, name: string) => `${name}-1`))
    for (const path of ['/chat', '/chat/s1', ...new Set(paths)]) {
      it(`render ${path} (${locale})`, async () => {
        session.credentials = { kind: 'local' }
        const html = await render(path, locale)
        expect(html).toContain('<main id="main"')
        expect(html).not.toContain('id="login-token"')
        expect(missing).toEqual([])
      })
    }
  }

  it('labels the chat controls', async () => {
    session.credentials = { kind: 'local' }
    const html = await render('/chat', 'en')
    for (const id of ['chat-input', 'chat-kbs']) {
      expect(html).toMatch(new RegExp(`<label[^>]*for="${id}"`))
      expect(html).toMatch(new RegExp(`id="${id}"`))
    }
    expect(html).toContain('aria-labelledby="chat-web-label"')
  })
})

describe('AnswerText', () => {
  it('renders known citations as buttons naming their document, an unknown marker as text', async () => {
    i18n.global.locale.value = 'en'
    const sources = [sourceFromJson({ handle: 'c1', file_name: 'handbook.pdf' })!] as Source[]
    const app = createSSRApp({ render: () => h(AnswerText, { text: 'Run it[[c1]] or not[[c7]].', sources }) }).use(i18n)
    collectStyles(app)
    const html = await renderToString(app)
    expect(html).toMatch(/<button type="button" class="citation-chip" aria-label="Source 1: handbook.pdf"[^>]*>\[1\]<\/button>/)
    expect(html).toContain('or not[[c7]].')
    expect(html.match(/<button/g)).toHaveLength(1)
  })
})
