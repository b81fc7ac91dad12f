// The ESM half of module-log.mjs (runs on the loader thread): appends each resolved URL to the log file.
import { appendFileSync } from 'node:fs'

const out = process.env.TOLLGATE_MODULE_LOG

export async function resolve(specifier, context, next) {
  const result = await next(specifier, context)
  if (out) appendFileSync(out, `esm ${result.url}\n`)
  return result
}
