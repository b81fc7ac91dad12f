// npm run openapi [-- --check]: writes the OpenAPI document generated from the routes to docs/openapi.json
// (--check: exit 1 if the checked-in file differs, writing nothing). Exit codes: 0 ok, 1 differs, 2 usage.
import { readFileSync, writeFileSync } from 'node:fs'
import { parseArgs } from 'node:util'
import { API_ROUTES } from '../control-plane/handler.ts'
import { buildOpenApiDocument } from '../control-plane/openapi.ts'
import { isMain } from './is-main.ts'

export const OPENAPI_PATH = new URL('../../docs/openapi.json', import.meta.url)

export function renderOpenApi(): string {
  return `${JSON.stringify(buildOpenApiDocument(API_ROUTES), null, 2)}\n`
}

function main(): number {
  let values: { check?: boolean; help?: boolean }
  try {
    ;({ values } = parseArgs({
      options: { check: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      strict: true,
    }))
  } catch (err) {
    process.stderr.write(`openapi: ${(err as Error).message}\n`)
    return 2
  }
  if (values.help) {
    process.stdout.write(
      'usage: npm run openapi [-- --check]\n  writes docs/openapi.json from the routes; --check only compares\n',
    )
    return 0
  }
  const text = renderOpenApi()
  if (values.check) {
    let current = ''
    try {
      current = readFileSync(OPENAPI_PATH, 'utf8')
    } catch {}
    if (current === text) return 0
    process.stderr.write('openapi: docs/openapi.json is out of date; run npm run openapi\n')
    return 1
  }
  writeFileSync(OPENAPI_PATH, text)
  process.stdout.write(`wrote docs/openapi.json (${Object.keys(JSON.parse(text).paths).length} paths)\n`)
  return 0
}

if (isMain(import.meta.url)) process.exitCode = main()
