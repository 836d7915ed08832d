// Checks the production build in dist/ against what the gateway serves it with:
// - first-load JavaScript (the entry chunk and the chunks index.html preloads), gzipped, within the
//   budget (BUDGET_BYTES; each file measured like `gzip -c file | wc -c`);
// - no inline script and no inline event handler in index.html, and no eval or new Function in any
//   chunk: the Content-Security-Policy (services/gateway/…/api/web.py) allows neither.
// Prints the sizes; exits 1 when a check fails.
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'

const DIST = new URL('../dist/', import.meta.url).pathname
const BASE = '/ui/'
const BUDGET_BYTES = 300 * 1000

const html = readFileSync(join(DIST, 'index.html'), 'utf8')
const failures = []

const attribute = (tag, name) => new RegExp(`\\s${name}\\s*=\\s*"([^"]*)"`, 'i').exec(tag)?.[1] ?? null
const scripts = [...html.matchAll(/<script\b[^>]*>([\s\S]*?)<\/script>/gi)]
for (const [tag, body] of scripts) {
  if (attribute(tag, 'src') === null || body.trim() !== '') failures.push(`index.html has an inline script: ${tag.slice(0, 80)}`)
}
if (/\son[a-z]+\s*=/i.test(html)) failures.push('index.html has an inline event handler')

const entry = scripts.map(([tag]) => attribute(tag, 'src')).filter(Boolean)
const preloaded = [...html.matchAll(/<link\b[^>]*>/gi)]
  .map(([tag]) => tag)
  .filter((tag) => /rel\s*=\s*"modulepreload"/i.test(tag))
  .map((tag) => attribute(tag, 'href'))
const firstLoad = [...new Set([...entry, ...preloaded])].map((href) => href.replace(BASE, ''))

const gzipped = (file) => gzipSync(readFileSync(join(DIST, file))).length
const kB = (bytes) => `${(bytes / 1000).toFixed(1)} kB`
let total = 0
console.log('first-load JavaScript (gzipped):')
for (const file of firstLoad) {
  const size = gzipped(file)
  total += size
  console.log(`  ${file.padEnd(48)} ${kB(size).padStart(10)}`)
}
console.log(`  ${'total'.padEnd(48)} ${kB(total).padStart(10)}   budget ${kB(BUDGET_BYTES)}`)
if (total > BUDGET_BYTES) failures.push(`first-load JavaScript is ${kB(total)} gzipped, over the budget of ${kB(BUDGET_BYTES)}`)

const assets = readdirSync(join(DIST, 'assets'))
const lazy = assets.filter((f) => f.endsWith('.js') && !firstLoad.includes(`assets/${f}`))
if (lazy.length) {
  console.log('loaded later (gzipped):')
  for (const file of lazy) console.log(`  ${file.padEnd(48)} ${kB(gzipped(`assets/${file}`)).padStart(10)}`)
}
for (const file of assets.filter((f) => f.endsWith('.js'))) {
  const code = readFileSync(join(DIST, 'assets', file), 'utf8')
  if (/\bnew Function\s*\(|[^.\w]eval\s*\(/.test(code)) failures.push(`assets/${file} calls eval or new Function`)
}

for (const failure of failures) console.error(`check-dist: ${failure}`)
process.exit(failures.length ? 1 : 0)
