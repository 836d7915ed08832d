/** Numbers as people read them, in the UI's language. */

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'] as const

/** `bytes` in the largest unit that keeps it at least 1 (1024 per step): `1.5 MB`. */
export function formatBytes(bytes: number, locale: string): string {
  let value = Math.max(0, bytes)
  let unit = 0
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024
    unit += 1
  }
  const digits = unit === 0 || value >= 100 ? 0 : 1
  return `${new Intl.NumberFormat(locale, { maximumFractionDigits: digits }).format(value)} ${UNITS[unit]}`
}

/** A duration in whole seconds, minutes or hours: `3 min`. */
export function formatDuration(seconds: number, locale: string): string {
  const [value, unit] =
    seconds < 90 ? [Math.max(1, Math.round(seconds)), 'second'] : seconds < 5400 ? [Math.round(seconds / 60), 'minute'] : [Math.round(seconds / 3600), 'hour']
  return new Intl.NumberFormat(locale, { style: 'unit', unit, unitDisplay: 'short' }).format(value)
}

export function formatNumber(value: number, locale: string): string {
  return new Intl.NumberFormat(locale).format(value)
}

/** The extension of a file name, lower-case, without the dot (`''` when it has none). */
export function extension(fileName: string): string {
  const dot = fileName.lastIndexOf('.')
  return dot > 0 ? fileName.slice(dot + 1).toLowerCase() : ''
}

/** Whether `url` is a web address a link may point to (never `javascript:` or `data:`). */
export function isWebUrl(url: string): boolean {
  return /^https?:\/\//i.test(url)
}
