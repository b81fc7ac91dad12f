// Preloaded with `node --import` in a child: records every module the process loads (ESM through a resolve
// hook, CommonJS through the resolver) into the file named by TOLLGATE_MODULE_LOG, one path a line.
import { appendFileSync } from 'node:fs'
import Module, { register } from 'node:module'

const out = process.env.TOLLGATE_MODULE_LOG
if (out) {
  register('./module-log-hooks.mjs', import.meta.url)
  const resolveFilename = Module._resolveFilename
  Module._resolveFilename = function (...args) {
    const file = resolveFilename.apply(this, args)
    appendFileSync(out, `cjs ${file}\n`)
    return file
  }
}
