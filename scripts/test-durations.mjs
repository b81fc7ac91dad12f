// Writes test/durations.json, which test/helpers/duration-sequencer.ts orders the test files by, from the
// durations vitest kept in its cache (.cache/vite/vitest/*/results.json: each file's whole time, its hooks
// and services' starts included) after a run of every project, e.g. in the clone `bash .ci/run` ran in:
//   node scripts/test-durations.mjs [checkout]      (default: this one)
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const checkout = process.argv[2] ?? root
const cacheDir = join(checkout, '.cache', 'vite', 'vitest')
const caches = existsSync(cacheDir)
  ? readdirSync(cacheDir)
      .map((d) => join(cacheDir, d, 'results.json'))
      .filter(existsSync)
  : []
if (caches.length === 0) {
  console.error(`no vitest results under ${cacheDir}: run the tests there first`)
  process.exit(2)
}
const durations = {}
for (const cache of caches) {
  for (const [key, { duration }] of JSON.parse(readFileSync(cache, 'utf8')).results) {
    const path = key.slice(key.indexOf(':') + 1)
    // Only files this checkout still has, in whole seconds and tenths.
    if (duration > 0 && existsSync(join(root, path))) durations[key] = Math.round(duration / 100) / 10
  }
}
const sorted = Object.fromEntries(Object.entries(durations).sort(([, a], [, b]) => b - a))
const out = join(root, 'test', 'durations.json')
writeFileSync(out, `${JSON.stringify(sorted, null, 2)}\n`)
console.log(`${relative(root, out)}: ${Object.keys(sorted).length} files`)
