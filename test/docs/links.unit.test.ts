// The README and docs/ stay honest: every relative link resolves to a file (and its #anchor to a heading of
// that file, slugged as GitHub does), every `npm run X` in them names a script of package.json, and the
// README stays a front door (word budget).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import { links, split } from './markdown.ts'

const ROOT = join(import.meta.dirname, '../..')
const pages = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
]
const scripts = Object.keys(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts as object)

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const line of split(md).prose.split('\n')) {
    const m = line.match(/^#{1,6}\s+(.*)$/)
    if (!m) continue
    const base = m[1]!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\- _]/gu, '')
      .replace(/ /g, '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n ? `${base}-${n}` : base)
  }
  return out
}

describe('README and docs/', () => {
  for (const page of pages) {
    it(`${page}: every relative link resolves, anchors included`, () => {
      const md = readFileSync(join(ROOT, page), 'utf8')
      const broken: string[] = []
      for (const link of links(md)) {
        if (/^(https?|mailto):/.test(link)) continue
        const [path, anchor] = link.split('#') as [string, string | undefined]
        const target = path ? join(ROOT, dirname(page), path) : join(ROOT, page)
        if (!existsSync(target)) {
          broken.push(`${link} (no ${relative(ROOT, target)})`)
          continue
        }
        if (anchor && statSync(target).isFile() && target.endsWith('.md')) {
          if (!anchors(readFileSync(target, 'utf8')).has(anchor))
            broken.push(`${link} (no heading #${anchor})`)
        }
      }
      expect(broken).toEqual([])
    })

    it(`${page}: every npm run command names a script of package.json`, () => {
      const md = readFileSync(join(ROOT, page), 'utf8')
      const named = [...md.matchAll(/npm run (?:-s |--silent )?([a-z][\w:.-]*)/g)].map((m) => m[1]!)
      expect(named.filter((n) => !scripts.includes(n))).toEqual([])
    })
  }

  it('the README is a front door: at most ~1,500 words', () => {
    const words = readFileSync(join(ROOT, 'README.md'), 'utf8').split(/\s+/).filter(Boolean).length
    expect(words).toBeLessThanOrEqual(1600)
  })

  it('a broken link or unknown script is found (the checks can fail)', () => {
    expect(
      anchors('# Metered calls: `ANY /m/:id[/rest][?query]`\n```\n# not a heading\n```').has(
        'metered-calls-any-midrestquery',
      ),
    ).toBe(true)
    expect(anchors('# a\n# a').has('a-1')).toBe(true)
    expect(links('see [x](docs/nowhere.md#y) and `[not](a link)`')).toEqual(['docs/nowhere.md#y'])
    expect(scripts).not.toContain('no-such-script')
  })
})
