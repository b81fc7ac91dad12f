// Test files with suites or tests that run only on a PostgreSQL server (`runIf(usingServer)`).
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'

const TEST_ROOT = join(import.meta.dirname, '..')

/** Their paths from the repository root, sorted. */
export function serverOnlyTestFiles(): string[] {
  const files: string[] = []
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else if (entry.name.endsWith('.test.ts') && readFileSync(path, 'utf8').includes('runIf(usingServer)'))
        files.push(relative(join(TEST_ROOT, '..'), path))
    }
  }
  walk(TEST_ROOT)
  return files.sort()
}
