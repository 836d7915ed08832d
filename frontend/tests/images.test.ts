/**
 * Images attached to a chat question: the type read from the bytes, the gateway's count and size
 * limits, the data URL exactly as sent, and an image too large made smaller when it can be.
 */
import { describe, expect, it } from 'vitest'

import {
  dataUrl,
  dataUrlLength,
  fitWithin,
  isRefusal,
  MAX_IMAGE_REF_CHARS,
  MAX_IMAGES_PER_MESSAGE,
  maxImageBytes,
  precheckImage,
  readImage,
  remainingChars,
  sniffImageType,
  type AttachedImage,
} from '../src/lib/images'

const PNG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]
const JPEG = [0xff, 0xd8, 0xff, 0xe0]
const GIF = [...'GIF89a'].map((c) => c.charCodeAt(0))
const WEBP = [...'RIFF'].map((c) => c.charCodeAt(0)).concat([0, 0, 0, 0], [...'WEBP'].map((c) => c.charCodeAt(0)))

function image(signature: number[], size: number, name = 'picture', type = ''): File {
  const bytes = new Uint8Array(size)
  bytes.set(signature)
  return new File([bytes], name, { type })
}

describe('image types', () => {
  it('are read from the bytes', () => {
    expect(sniffImageType(new Uint8Array([...PNG, 0]))).toBe('image/png')
    expect(sniffImageType(new Uint8Array(JPEG))).toBe('image/jpeg')
    expect(sniffImageType(new Uint8Array(GIF))).toBe('image/gif')
    expect(sniffImageType(new Uint8Array(WEBP))).toBe('image/webp')
    expect(sniffImageType(new TextEncoder().encode('<svg xmlns="http://www.w3.org/2000/svg"/>'))).toBeNull()
    expect(sniffImageType(new Uint8Array([...'RIFF'].map((c) => c.charCodeAt(0)).concat([0, 0, 0, 0], [...'WAVE'].map((c) => c.charCodeAt(0)))))).toBeNull()
  })

  it('named by the browser must be one of png, jpeg, webp or gif; without one the bytes decide', async () => {
    expect(precheckImage({ type: 'image/svg+xml' }, 0)).toEqual({ code: 'unsupported_type' })
    expect(precheckImage({ type: 'image/heic' }, 0)).toEqual({ code: 'unsupported_type' })
    expect(precheckImage({ type: '' }, 0)).toBeNull()
    expect(await readImage(new File(['plain text'], 'notes.png', { type: '' }), MAX_IMAGE_REF_CHARS, null)).toEqual({ code: 'unsupported_type' })
    expect(await readImage(new File([], 'empty.png'), MAX_IMAGE_REF_CHARS, null)).toEqual({ code: 'empty' })
  })

  it('a file named .png holding a JPEG is sent as what it is', async () => {
    const read = await readImage(image(JPEG, 10, 'photo.png', 'image/png'), MAX_IMAGE_REF_CHARS, null)
    expect(isRefusal(read)).toBe(false)
    expect((read as AttachedImage).url.startsWith('data:image/jpeg;base64,')).toBe(true)
  })
})

describe('data URLs', () => {
  it('hold the bytes in base64 after the type, their length known before reading', async () => {
    const decode = (url: string) => Uint8Array.from(atob(url.slice(url.indexOf(',') + 1)), (c) => c.charCodeAt(0))
    expect(dataUrl('image/png', new TextEncoder().encode('Man'))).toBe('data:image/png;base64,TWFu')
    expect(dataUrl('image/png', new TextEncoder().encode('Ma'))).toBe('data:image/png;base64,TWE=')
    const bytes = new Uint8Array([...PNG, 0, 1, 2, 250, 251, 252, 253])
    const url = dataUrl('image/png', bytes)
    expect(decode(url)).toEqual(bytes)
    expect(url.length).toBe(dataUrlLength('image/png', bytes.length))
    // Large enough to be encoded in several steps.
    const large = new Uint8Array(100_003).map((_, i) => (i * 7) % 256)
    const largeUrl = dataUrl('image/gif', large)
    expect(largeUrl.startsWith('data:image/gif;base64,')).toBe(true)
    expect(decode(largeUrl)).toEqual(large)
    expect(largeUrl.length).toBe(dataUrlLength('image/gif', large.length))
  })

  it('fit the gateway’s limit exactly at the largest size it allows', async () => {
    const most = maxImageBytes('image/png', MAX_IMAGE_REF_CHARS)
    expect(dataUrlLength('image/png', most)).toBeLessThanOrEqual(MAX_IMAGE_REF_CHARS)
    expect(dataUrlLength('image/png', most + 3)).toBeGreaterThan(MAX_IMAGE_REF_CHARS)
    const fits = await readImage(image(PNG, most, 'fits.png'), MAX_IMAGE_REF_CHARS, null)
    expect(isRefusal(fits)).toBe(false)
    expect((fits as AttachedImage).url.length).toBeLessThanOrEqual(MAX_IMAGE_REF_CHARS)
    expect(await readImage(image(PNG, most + 3, 'big.png'), MAX_IMAGE_REF_CHARS, null)).toEqual({ code: 'too_large', limitBytes: most })
  })
})

describe('limits of one question', () => {
  it('at most four images', () => {
    expect(precheckImage({ type: 'image/png' }, MAX_IMAGES_PER_MESSAGE - 1)).toBeNull()
    expect(precheckImage({ type: 'image/png' }, MAX_IMAGES_PER_MESSAGE)).toEqual({ code: 'too_many', limit: MAX_IMAGES_PER_MESSAGE })
  })

  it('the images together within one image’s limit: what one takes, the next cannot have', async () => {
    const first = (await readImage(image(PNG, 300_000), remainingChars([]), null)) as AttachedImage
    expect(remainingChars([first])).toBe(MAX_IMAGE_REF_CHARS - first.url.length)
    const second = await readImage(image(PNG, 300_000), remainingChars([first]), null)
    expect(second).toEqual({ code: 'too_large', limitBytes: maxImageBytes('image/png', remainingChars([first])) })
  })

  it('an image too large is made smaller when it can be, and sent as the smaller one', async () => {
    const asked: number[] = []
    const smaller = new Blob([new Uint8Array([...JPEG, 1, 2, 3])])
    const read = await readImage(image(PNG, 600_000, 'screenshot.png'), MAX_IMAGE_REF_CHARS, async (_, maxBytes) => {
      asked.push(maxBytes)
      return smaller
    })
    expect(asked).toEqual([maxImageBytes('image/jpeg', MAX_IMAGE_REF_CHARS)])
    expect(read).toMatchObject({ name: 'screenshot.png', type: 'image/jpeg', blob: smaller })
    expect((read as AttachedImage).url).toBe(dataUrl('image/jpeg', new Uint8Array([...JPEG, 1, 2, 3])))
    // A shrinker that cannot, or fails: refused with the limit.
    expect(await readImage(image(PNG, 600_000), MAX_IMAGE_REF_CHARS, async () => null)).toMatchObject({ code: 'too_large' })
    expect(await readImage(image(PNG, 600_000), MAX_IMAGE_REF_CHARS, () => Promise.reject(new Error('no canvas')))).toMatchObject({ code: 'too_large' })
  })
})

describe('drawing sizes', () => {
  it('scale down to the longer side, keeping the shape, never up', () => {
    expect(fitWithin(4000, 3000, 2048)).toEqual({ width: 2048, height: 1536 })
    expect(fitWithin(300, 1200, 160)).toEqual({ width: 40, height: 160 })
    expect(fitWithin(100, 50, 160)).toEqual({ width: 100, height: 50 })
    expect(fitWithin(10000, 1, 160)).toEqual({ width: 160, height: 1 })
  })
})
