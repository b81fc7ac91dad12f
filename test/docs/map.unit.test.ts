// The map held to the house: docs/architecture.md names every folder of src/ and only files that exist,
// every page of docs/ can be reached from the README by following links, and docs/schemes.md's table lists
// exactly the schemes src/schemes/index.ts registers.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import { links } from './markdown.ts'

const ROOT = join(import.meta.dirname, '../..')
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8')

/** The folders of src/ (recursively), as `src/a/b/`. */
function sourceFolders(dir = 'src'): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => [`${dir}/${e.name}/`, ...sourceFolders(`${dir}/${e.name}`)])
}

/**
 * A folder is named by its path (`src/books/`), or, below a named folder, by its own name with a slash
 * (`routes/` on the line of `src/control-plane/`).
 */
function unnamedFolders(map: string, folders: string[]): string[] {
  return folders.filter((folder) => {
    if (map.includes(folder)) return false
    const parts = folder.split('/').filter(Boolean)
    if (parts.length < 3) return true
    return !map.includes(`${parts.at(-1)}/`)
  })
}

/** The `src/…` file paths a page names that do not exist. */
function missingFiles(map: string): string[] {
  const named = [...map.matchAll(/\bsrc\/[\w./-]+\.(?:ts|js|sql|html|css)\b/g)].map((m) => m[0])
  return [...new Set(named)].filter((path) => !existsSync(join(ROOT, path)))
}

/** The Markdown pages reachable from `start` by relative links, as paths from the root. */
function reachable(
  start: string,
  readPage: (path: string) => string,
  exists = (path: string) => existsSync(join(ROOT, path)),
): Set<string> {
  const seen = new Set<string>([start])
  const queue = [start]
  for (let page = queue.shift(); page !== undefined; page = queue.shift()) {
    for (const link of links(readPage(page))) {
      if (/^(https?|mailto):/.test(link)) continue
      const path = link.split('#')[0]!
      if (!path.endsWith('.md')) continue
      const target = relative(ROOT, normalize(join(ROOT, dirname(page), path)))
      if (seen.has(target) || !exists(target)) continue
      seen.add(target)
      queue.push(target)
    }
  }
  return seen
}

/** The folders `SCHEMES` in src/schemes/index.ts lists, through the import of each factory. */
function registeredFolders(index: string): string[] {
  const list = index.match(/const SCHEMES[^=]*=\s*\[([^\]]*)\]/)?.[1] ?? ''
  return list
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((factory) => {
      const from = index.match(new RegExp(`import \\{[^}]*\\b${factory}\\b[^}]*\\} from '\\./([\\w-]+)/`))
      return from ? from[1]! : `(${factory}: no import)`
    })
}

/** The first column of docs/schemes.md's table: `tx-hash/` → tx-hash. */
function tableFolders(page: string): string[] {
  return [...page.matchAll(/^\| `([\w-]+)\/` \|/gm)].map((m) => m[1]!)
}

describe('the map of the house', () => {
  it('docs/architecture.md names every folder of src/ and no file that is gone', () => {
    const map = read('docs/architecture.md')
    expect(unnamedFolders(map, sourceFolders())).toEqual([])
    expect(missingFiles(map)).toEqual([])
  })

  it('every page of docs/ is reachable from the README', () => {
    const seen = reachable('README.md', read)
    const pages = readdirSync(join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`)
    expect(pages.filter((p) => !seen.has(p))).toEqual([])
  })

  it("docs/schemes.md's table lists the registered schemes, no more", () => {
    const registered = registeredFolders(read('src/schemes/index.ts'))
    expect(registered.length).toBeGreaterThan(0)
    expect(tableFolders(read('docs/schemes.md')).sort()).toEqual(registered.sort())
  })

  it('the checks can fail', () => {
    expect(unnamedFolders('src/a/ · b/', ['src/a/', 'src/a/b/', 'src/c/', 'src/a/d/'])).toEqual([
      'src/c/',
      'src/a/d/',
    ])
    expect(missingFiles('see src/no/such-file.ts and src/money.ts')).toEqual(['src/no/such-file.ts'])
    const site: Record<string, string> = {
      'README.md': '[a](docs/a.md)',
      'docs/a.md': '[b](b.md#x) [out](https://example.com/c.md)',
      'docs/b.md': '',
      'docs/c.md': '[a](a.md)',
    }
    const seen = reachable(
      'README.md',
      (p) => site[p] ?? '',
      (p) => p in site,
    )
    expect([...seen].sort()).toEqual(['README.md', 'docs/a.md', 'docs/b.md'])
    expect(
      registeredFolders("import { aScheme } from './a/index.ts'\nconst SCHEMES = [aScheme, bScheme]"),
    ).toEqual(['a', '(bScheme: no import)'])
    expect(tableFolders('| folder |\n|---|\n| `a/` | x |\n| `b-c/` | y |')).toEqual(['a', 'b-c'])
  })
})
