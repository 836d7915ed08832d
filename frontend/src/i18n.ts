/** The UI's languages: English and Chinese, the browser's language by default, a choice kept in
 * localStorage (a preference, not a credential). */

import { createI18n } from 'vue-i18n'

import admin from './locales/admin'
import en from './locales/en'
import evaluation from './locales/evaluation'
import zh from './locales/zh'

export const LOCALES = ['en', 'zh'] as const
export type Locale = (typeof LOCALES)[number]
export const LOCALE_NAMES: Record<Locale, string> = { en: 'English', zh: '中文' }

const CHOICE_KEY = 'knowsphere.locale'

/** The first of the browser's languages this UI speaks (`zh-TW` → `zh`), else English. */
export function browserLocale(languages: readonly string[] = globalThis.navigator?.languages ?? []): Locale {
  for (const tag of languages) {
    const base = tag.toLowerCase().split('-')[0]
    if ((LOCALES as readonly string[]).includes(base)) return base as Locale
  }
  return 'en'
}

function chosenLocale(): Locale | null {
  try {
    const chosen = globalThis.localStorage?.getItem(CHOICE_KEY)
    return chosen && (LOCALES as readonly string[]).includes(chosen) ? (chosen as Locale) : null
  } catch {
    return null
  }
}

export const i18n = createI18n({
  legacy: false,
  locale: chosenLocale() ?? browserLocale(),
  fallbackLocale: 'en',
  messages: {
    en: { ...en, ...admin.en, ...evaluation.en },
    zh: { ...zh, ...admin.zh, ...evaluation.zh },
  },
})

export function setLocale(locale: Locale): void {
  i18n.global.locale.value = locale
  try {
    globalThis.localStorage?.setItem(CHOICE_KEY, locale)
  } catch {
    // not kept: the browser's language applies next time
  }
}
