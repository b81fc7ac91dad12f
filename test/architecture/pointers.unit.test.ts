// Comments say why in place: no pointer to a document a reader of the repository does not have (an issue
// number, a design section). Scans the source, tests, bench, deployment files and docs.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')
const DIRS = ['src', 'test', 'bench', 'deploy', 'docs', 'scripts', 'config', 'grafana']
const POINTER = new RegExp(['\\bissue', ' \\d+\\b|DESIGN', ' §'].join(''))

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(path).isDirectory()) return name === 'node_modules' || name === 'results' ? [] : files(path)
    return /\.(ts|mjs|sql|ya?ml|md|json)$/.test(name) ? [path] : []
  })
}

it('no comment points at an issue number or a design section', () => {
  const found: string[] = []
  for (const file of DIRS.flatMap((d) => files(join(ROOT, d)))) {
    const rel = relative(ROOT, file)
    readFileSync(file, 'utf8')
      .split('\n')
      .forEach((line, i) => {
        if (POINTER.test(line)) found.push(`${rel}:${i + 1}: ${line.trim().slice(0, 100)}`)
      })
  }
  expect(found).toEqual([])
  expect(POINTER.test(['// see issue', ' 12'].join(''))).toBe(true)
})
