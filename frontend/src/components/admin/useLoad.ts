/** A page's data read from the API: whether the first read is still running, the error a user reads,
 * and a way to read again. The read runs when the page is mounted, before a server render too (so a
 * page rendered ahead shows its data), and again whenever `key` changes; a read overtaken by a newer one
 * is dropped. Once data has arrived, reading again keeps showing it until the new data replaces it. */

import { onBeforeUnmount, onMounted, onServerPrefetch, ref, watch, type Ref } from 'vue'

import { errorText } from '../../client'

export interface Loaded<T> {
  data: Ref<T>
  loading: Ref<boolean>
  error: Ref<string>
  reload: () => Promise<void>
}

export function useLoad<T>(read: (signal: AbortSignal) => Promise<T>, initial: T, key?: () => unknown): Loaded<T> {
  const data = ref(initial) as Ref<T>
  const loading = ref(true)
  const error = ref('')
  let current: AbortController | null = null
  let loaded = false

  async function reload(): Promise<void> {
    current?.abort()
    const controller = new AbortController()
    current = controller
    if (!loaded) loading.value = true
    try {
      const value = await read(controller.signal)
      if (controller.signal.aborted) return
      data.value = value
      error.value = ''
      loaded = true
    } catch (failure) {
      if (!controller.signal.aborted) error.value = errorText(failure)
    } finally {
      if (current === controller) loading.value = false
    }
  }

  onServerPrefetch(reload)
  onMounted(reload)
  onBeforeUnmount(() => current?.abort())
  if (key) watch(key, () => void reload())
  return { data, loading, error, reload }
}
