/** The one API client of the app, and who is signed in (reactive, for the views and the router). */

import { reactive } from 'vue'

import { ApiClient, ApiError, type Credentials } from './lib/api'
import { i18n } from './i18n'

export const api = new ApiClient({ language: () => i18n.global.locale.value })

export const session = reactive({
  credentials: api.credentials.load() as Credentials | null,
  /** Why the user was signed out, shown on the login page. */
  notice: '',
})

export async function signIn(credentials: Credentials): Promise<void> {
  await api.signIn(credentials)
  session.credentials = credentials
  session.notice = ''
}

export function signOut(notice = ''): void {
  api.signOut()
  session.credentials = null
  session.notice = notice
}

/** An error as the user reads it: the server's message, or a translated one for the client's own. */
export function errorText(error: unknown): string {
  const { t, te } = i18n.global
  if (error instanceof ApiError || (typeof error === 'object' && error !== null && 'code' in error)) {
    const { code, message } = error as { code: string; message: string }
    if (te(`errors.${code}`)) return t(`errors.${code}`)
    return message || code
  }
  return error instanceof Error ? error.message : String(error)
}
