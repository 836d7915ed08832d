// Writes a gzipped copy (`name.gz`) beside each text asset of dist/assets/, which the gateway sends to
// clients that accept gzip (services/gateway/…/api/web.py): the hashed assets never change, so they are
// compressed once, here, at the highest level.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { constants, gzipSync } from 'node:zlib'

const ASSETS = new URL('../dist/assets/', import.meta.url).pathname
const COMPRESSIBLE = /\.(js|css|svg|json|txt|map)$/

let count = 0
for (const file of readdirSync(ASSETS).filter((f) => COMPRESSIBLE.test(f))) {
  const data = readFileSync(join(ASSETS, file))
  const gzipped = gzipSync(data, { level: constants.Z_BEST_COMPRESSION })
  if (gzipped.length < data.length) {
    writeFileSync(join(ASSETS, `${file}.gz`), gzipped)
    count += 1
  }
}
console.log(`compress: ${count} gzipped copies in dist/assets/`)
