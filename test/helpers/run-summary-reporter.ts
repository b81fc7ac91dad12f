// Printed after vitest's own summary, where a reader looks: the server-only tests this run skipped (no
// DATABASE_URL) with the command that runs them, and any file a test left in the checkout's .data/ (a dev chain
// state or database there makes a later `npm start` refuse to start).
import { existsSync, readdirSync } from 'node:fs'
import { join, relative } from 'node:path'
import type { Reporter, TestModule } from 'vitest/node'
import { serverOnlyTestFiles } from './server-only-files.ts'

const ROOT = join(import.meta.dirname, '../..')
const DATA = join(ROOT, '.data')

const listData = () => new Set(existsSync(DATA) ? readdirSync(DATA) : [])

export default class RunSummaryReporter implements Reporter {
  private readonly before = listData()

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const lines: string[] = []
    const ran = new Set(modules.map((m) => relative(ROOT, m.moduleId)))
    const skipped = serverOnlyTestFiles().filter((f) => ran.has(f))
    if (!process.env.DATABASE_URL && skipped.length > 0) {
      lines.push(
        'Server-only tests in these files were skipped (no DATABASE_URL; they need several sessions on one PostgreSQL server, PGlite is one):',
        ...skipped.map((f) => `  ${f}`),
        'Run them with a server and a database that exists: DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres npm test',
      )
    }
    const left = [...listData()].filter((f) => !this.before.has(f))
    if (left.length > 0) {
      lines.push(
        `A test left files in the checkout's .data/ (remove them; find the test): ${left.join(', ')}`,
      )
    }
    if (lines.length) process.stdout.write(`\n${lines.join('\n')}\n`)
  }
}
