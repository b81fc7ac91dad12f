// How the tests start tollgate's own processes (the server, the reconcile CLI): the built dist/ when it is
// current with src/, as npm start runs it, else src/ through tsx. Loading the service from dist/ costs ~1.3 s
// of CPU against ~3.4 s through tsx's loader (`node -e "import('./dist/service.js')"` against `node --import
// tsx -e "import('./src/service.ts')"`, this 2-core machine), and the suites start dozens of servers; CI builds
// dist/ before the tests (.ci/run). "Current" is scripts/build.mjs --if-stale's rule: dist/main.js no older
// than any file under src/ (it rebuilds all of dist/ at once). Node itself is the process either way: the PID
// a test holds is the server's own. The CLI tests run the CLIs as a user does (tsx src/cli/…), not through this.
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

const ROOT = join(import.meta.dirname, '..', '..')

let built: boolean | undefined

function newestMtimeMs(dir: string): number {
  let newest = 0
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name)
    newest = Math.max(newest, entry.isDirectory() ? newestMtimeMs(p) : statSync(p).mtimeMs)
  }
  return newest
}

/** True when dist/ holds a build of src/ as it is now (read once per process). */
export function distIsCurrent(): boolean {
  if (built === undefined) {
    const main = join(ROOT, 'dist', 'main.js')
    built = existsSync(main) && statSync(main).mtimeMs >= newestMtimeMs(join(ROOT, 'src'))
  }
  return built
}

/**
 * Node's arguments to run `src/<path>.ts` (without its extension: 'main', 'cli/reconcile'), by absolute path;
 * through tsx, from a working directory whose node_modules has it (the repository's).
 */
export function entryArgs(path: string): string[] {
  return distIsCurrent()
    ? [join(ROOT, 'dist', `${path}.js`)]
    : ['--import', 'tsx', join(ROOT, 'src', `${path}.ts`)]
}
