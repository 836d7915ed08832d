/** The server's refusal of a form, shown where it belongs: beside the field its `error.field` names (or
 * the nearest one that field lies under), else above the form's buttons. */

import { reactive, ref } from 'vue'

import { errorText } from '../../client'
import { ApiError } from '../../lib/api'
import { fieldOf } from '../../lib/adminApi'

export function useFieldErrors(fields: readonly string[], idOf: (field: string) => string) {
  const errors = reactive<Record<string, string>>({})
  const formError = ref('')

  function clear(): void {
    for (const key of Object.keys(errors)) delete errors[key]
    formError.value = ''
  }

  /** Marks `field` as wrong with `message` (a check of the page's own). */
  function set(field: string, message: string): void {
    errors[field] = message
  }

  /** Shows a failed save: beside its field when the error names one this form has. */
  function show(error: unknown): void {
    const field = error instanceof ApiError ? fieldOf(error.field, fields) : null
    if (field) errors[field] = error instanceof ApiError ? error.message : errorText(error)
    else formError.value = errorText(error)
  }

  /** Moves the focus to the first field with an error, in the form's order. */
  function focusFirst(): void {
    const first = fields.find((field) => errors[field])
    if (first && typeof document !== 'undefined') document.getElementById(idOf(first))?.focus()
  }

  const any = () => Object.keys(errors).length > 0

  return { errors, formError, clear, set, show, focusFirst, any }
}
