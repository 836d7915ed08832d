/**
 * Images attached to a chat question. They travel in the turn request's `images` as
 * `data:image/…;base64` URLs, within the gateway's limits (`ChatTurnRequest` of
 * services/gateway/…/api/chat.py, numbers from libs/contracts/…/events.py): at most
 * {@link MAX_IMAGES_PER_MESSAGE} images, each URL at most {@link MAX_IMAGE_REF_CHARS} characters.
 *
 * A file's type is read from its first bytes, not trusted from its name or the browser's guess. An
 * image too large is made smaller in the browser (scaled down, JPEG) when it can be; otherwise it is
 * refused with the limit. The page shows attached images by drawing them on a canvas: the gateway's
 * Content-Security-Policy (`img-src 'self'`) keeps `data:` and `blob:` URLs out of `<img>`.
 */

export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'] as const
export type ImageType = (typeof IMAGE_TYPES)[number]

/** The most images one question carries (`MAX_IMAGES_PER_MESSAGE`). */
export const MAX_IMAGES_PER_MESSAGE = 4
/** The longest image URL the gateway takes (`MAX_IMAGE_REF_CHARS`: about 500 KiB of image). */
export const MAX_IMAGE_REF_CHARS = 700_000
/**
 * The characters of all of a question's data URLs together. The question crosses the message bus as
 * one message of at most 1 MiB (the reason for the per-image limit), so its images together get what
 * one image may have.
 */
export const MAX_IMAGES_TOTAL_CHARS = MAX_IMAGE_REF_CHARS
/** The longest side of an image made smaller: vision models read little more. */
export const MAX_SHRUNK_SIDE = 2048
/** How often a smaller size is tried before giving up. */
export const SHRINK_ATTEMPTS = 6
export const JPEG_QUALITY = 0.85

export interface AttachedImage {
  name: string
  type: ImageType
  /** The data URL sent. */
  url: string
  /** The image's bytes as sent, for drawing it. */
  blob: Blob
}

export type ImageRefusal =
  | { code: 'too_many'; limit: number }
  | { code: 'unsupported_type' }
  | { code: 'empty' }
  | { code: 'too_large'; limitBytes: number }

/** Makes `blob` an image of at most `maxBytes` bytes; null when it cannot. */
export type Shrinker = (blob: Blob, maxBytes: number) => Promise<Blob | null>

/** The image type of `bytes` from their signature; null when they are none of {@link IMAGE_TYPES}. */
export function sniffImageType(bytes: Uint8Array): ImageType | null {
  const starts = (offset: number, ...signature: number[]) => signature.every((b, i) => bytes[offset + i] === b)
  if (starts(0, 0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png'
  if (starts(0, 0xff, 0xd8, 0xff)) return 'image/jpeg'
  if (starts(0, 0x47, 0x49, 0x46, 0x38) && (bytes[4] === 0x37 || bytes[4] === 0x39) && bytes[5] === 0x61) return 'image/gif'
  if (starts(0, 0x52, 0x49, 0x46, 0x46) && starts(8, 0x57, 0x45, 0x42, 0x50)) return 'image/webp'
  return null
}

function prefix(type: string): string {
  return `data:${type};base64,`
}

/** The length of the data URL of `bytes` bytes of `type`. */
export function dataUrlLength(type: string, bytes: number): number {
  return prefix(type).length + 4 * Math.ceil(bytes / 3)
}

/** The most bytes of `type` whose data URL fits in `chars` characters. */
export function maxImageBytes(type: string, chars: number): number {
  return Math.max(0, Math.floor((chars - prefix(type).length) / 4) * 3)
}

/** The data URL of `bytes`. */
export function dataUrl(type: string, bytes: Uint8Array): string {
  let binary = ''
  const step = 0x8000 // String.fromCharCode takes its bytes as arguments: a bounded number at a time
  for (let i = 0; i < bytes.length; i += step) binary += String.fromCharCode(...bytes.subarray(i, i + step))
  return prefix(type) + btoa(binary)
}

/** The characters left for one more image beside `attached`. */
export function remainingChars(attached: readonly { url: string }[]): number {
  const used = attached.reduce((sum, image) => sum + image.url.length, 0)
  return Math.min(MAX_IMAGE_REF_CHARS, MAX_IMAGES_TOTAL_CHARS - used)
}

/** Why a file cannot be attached beside `attachedCount` images, judged before reading it; null when it may be read. */
export function precheckImage(file: { type: string }, attachedCount: number): ImageRefusal | null {
  if (attachedCount >= MAX_IMAGES_PER_MESSAGE) return { code: 'too_many', limit: MAX_IMAGES_PER_MESSAGE }
  // A type the browser names must be one of ours; without one, the bytes decide.
  if (file.type && !(IMAGE_TYPES as readonly string[]).includes(file.type)) return { code: 'unsupported_type' }
  return null
}

/**
 * The image of `file` as it will be sent, in at most `budgetChars` characters of data URL — made
 * smaller by `shrink` when it is larger — or why it cannot be.
 */
export async function readImage(
  file: File,
  budgetChars: number,
  shrink: Shrinker | null = shrinkImage,
): Promise<AttachedImage | ImageRefusal> {
  const bytes = new Uint8Array(await file.arrayBuffer())
  if (bytes.length === 0) return { code: 'empty' }
  const type = sniffImageType(bytes)
  if (!type) return { code: 'unsupported_type' }
  if (dataUrlLength(type, bytes.length) <= budgetChars) return { name: file.name, type, url: dataUrl(type, bytes), blob: file }
  const limitBytes = maxImageBytes(type, budgetChars)
  const smaller = shrink ? await shrink(file, maxImageBytes('image/jpeg', budgetChars)).catch(() => null) : null
  if (smaller) {
    const shrunk = new Uint8Array(await smaller.arrayBuffer())
    const shrunkType = sniffImageType(shrunk)
    if (shrunkType && dataUrlLength(shrunkType, shrunk.length) <= budgetChars) {
      return { name: file.name, type: shrunkType, url: dataUrl(shrunkType, shrunk), blob: smaller }
    }
  }
  return { code: 'too_large', limitBytes }
}

export function isRefusal(value: AttachedImage | ImageRefusal): value is ImageRefusal {
  return 'code' in value
}

/** `width` × `height` scaled down (never up) so that the longer side is at most `maxSide`. */
export function fitWithin(width: number, height: number, maxSide: number): { width: number; height: number } {
  const scale = Math.min(1, maxSide / Math.max(width, height, 1))
  return { width: Math.max(1, Math.round(width * scale)), height: Math.max(1, Math.round(height * scale)) }
}

/** The browser's {@link Shrinker}: the image drawn smaller on a canvas, as JPEG on white, until it fits. */
export async function shrinkImage(blob: Blob, maxBytes: number): Promise<Blob | null> {
  if (typeof document === 'undefined' || typeof createImageBitmap !== 'function') return null
  const bitmap = await createImageBitmap(blob)
  try {
    let side = Math.min(MAX_SHRUNK_SIDE, Math.max(bitmap.width, bitmap.height))
    for (let attempt = 0; attempt < SHRINK_ATTEMPTS && side >= 16; attempt++) {
      const size = fitWithin(bitmap.width, bitmap.height, side)
      const canvas = document.createElement('canvas')
      canvas.width = size.width
      canvas.height = size.height
      const context = canvas.getContext('2d')
      if (!context) return null
      context.fillStyle = '#ffffff' // JPEG has no transparency
      context.fillRect(0, 0, size.width, size.height)
      context.drawImage(bitmap, 0, 0, size.width, size.height)
      const encoded = await new Promise<Blob | null>((resolve) => canvas.toBlob(resolve, 'image/jpeg', JPEG_QUALITY))
      if (!encoded) return null
      if (encoded.size <= maxBytes) return encoded
      // Bytes grow with the area: shrink the side by the square root of how far over it is, and a little more.
      side = Math.floor(side * Math.sqrt(maxBytes / encoded.size) * 0.9)
    }
    return null
  } finally {
    bitmap.close()
  }
}

/** Draws `blob` on `canvas`, at most `maxSide` pixels on its longer side. */
export async function drawImage(canvas: HTMLCanvasElement, blob: Blob, maxSide: number): Promise<void> {
  if (typeof createImageBitmap !== 'function') return
  const bitmap = await createImageBitmap(blob)
  try {
    const size = fitWithin(bitmap.width, bitmap.height, maxSide)
    canvas.width = size.width
    canvas.height = size.height
    canvas.getContext('2d')?.drawImage(bitmap, 0, 0, size.width, size.height)
  } finally {
    bitmap.close()
  }
}
