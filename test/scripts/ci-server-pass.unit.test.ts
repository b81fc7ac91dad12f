// CI's second pass runs the integration suite on a PostgreSQL server and leaves out the files that never
// reach it (.ci/run's database_free list). A file on that list that starts using the server's database
// would silently lose its server run: this holds every listed file, and the test files it imports, to
// starting no database but an embedded one.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')
const CI = readFileSync(join(ROOT, '.ci/run'), 'utf8')

function listedEntries(list = 'database_free'): string[] {
  const block = new RegExp(`${list}=\\(([\\s\\S]*?)\\)`).exec(CI)
  if (!block) throw new Error(`.ci/run has no ${list} list`)
  return [...block[1]!.matchAll(/'([^']+)'/g)].map((m) => m[1]!)
}

function testFilesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name)
    if (e.isDirectory()) return testFilesUnder(path)
    return e.name.endsWith('.test.ts') && !e.name.endsWith('.unit.test.ts') ? [path] : []
  })
}

/** An entry is a folder (ending in /) or a file; .ci/run drops the files whose path contains one. */
function filesOf(entry: string): string[] {
  if (entry.endsWith('/')) return testFilesUnder(join(ROOT, entry))
  return [join(ROOT, entry)]
}

/** The file and the test files it imports (relative imports under test/), transitively. */
function withLocalImports(file: string, seen = new Set<string>()): Set<string> {
  if (seen.has(file)) return seen
  seen.add(file)
  for (const m of readFileSync(file, 'utf8').matchAll(/from '(\.[^']+)'/g)) {
    const target = resolve(dirname(file), m[1]!)
    if (target.startsWith(join(ROOT, 'test')) && existsSync(target) && statSync(target).isFile())
      withLocalImports(target, seen)
  }
  return seen
}

// The helpers that define these functions (their callers are what is checked).
const DEFINES = ['database.ts', 'service.ts', 'child-service.ts']

/** What in a file would reach the server's database, or null. */
function reachesServer(text: string): string | null {
  for (const name of ['freshDatabaseUrl', 'migratedDatabase', "inject('databasePrefix')"])
    if (text.includes(name)) return name
  for (const m of text.matchAll(/(startTestService|startChildService)\(([^)]*)\)/g))
    if (!/databaseUrl: null/.test(m[2]!)) return `${m[1]}(${m[2]})`
  return null
}

describe('CI server pass: the files it leaves out', () => {
  it('moves to the server pass only files that start no database but an embedded one', () => {
    const moved = listedEntries('to_server_pass')
    expect(moved.length).toBeGreaterThan(0)
    for (const entry of moved) {
      expect(filesOf(entry).filter(existsSync), entry).not.toEqual([])
      expect(
        listedEntries().some((free) => entry.startsWith(free)),
        `${entry} is not in database_free`,
      ).toBe(true)
    }
  })

  it('names files that exist', () => {
    for (const entry of listedEntries()) expect(filesOf(entry).filter(existsSync), entry).not.toEqual([])
  })

  it('start no database but an embedded one, nor do the test files they import', () => {
    const found: string[] = []
    for (const entry of listedEntries())
      for (const file of filesOf(entry))
        for (const f of withLocalImports(file)) {
          if (DEFINES.some((d) => f.endsWith(join('helpers', d)))) continue
          const what = reachesServer(readFileSync(f, 'utf8'))
          if (what) found.push(`${relative(ROOT, file)} (${relative(ROOT, f)}): ${what}`)
        }
    expect(found).toEqual([])
  })

  it('would catch a file that starts a service on the default database', () => {
    expect(reachesServer('const s = await startTestService({ adminToken })')).toContain('startTestService')
    expect(reachesServer('const s = await startTestService({ databaseUrl: null })')).toBeNull()
    expect(reachesServer('const url = await freshDatabaseUrl()')).toBe('freshDatabaseUrl')
  })
})
