// The README's bench table is the one the newest full run in bench/results generates, and every committed
// results file is named for what it is (a full run, a labelled run, a history bench), never a partial run.
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { latestFullRun, readmeTable, spliceReadme, TABLE_END, TABLE_START } from '../../bench/readme-table.ts'
import { resultsName } from '../../bench/report.ts'

const ROOT = join(import.meta.dirname, '../..')
const RESULTS = join(ROOT, 'bench', 'results')

describe('README bench table', () => {
  it('is the table of the newest full run, as `npm run bench -- --readme --write` writes it', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
    expect(spliceReadme(readme, readmeTable(RESULTS))).toBe(readme)
    expect(readme).toContain(latestFullRun(RESULTS).slice(ROOT.length + 1))
  })

  it('a table from another run does not match (the check can fail)', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-readme-'))
    try {
      const run = JSON.parse(readFileSync(latestFullRun(RESULTS), 'utf8'))
      run.scenarios[0].rps += 1
      writeFileSync(join(dir, '2099-01-01T00-00-00-full.json'), JSON.stringify(run))
      expect(spliceReadme(readme, readmeTable(dir))).not.toBe(readme)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
    expect(() => spliceReadme('no markers', 'x')).toThrow(/markers/)
    expect(readme.indexOf(TABLE_START)).toBeLessThan(readme.indexOf(TABLE_END))
  })

  it('every committed results file says what it is; no partial run is committed', () => {
    const files = execFileSync('git', ['ls-files', 'bench/results'], { cwd: ROOT, encoding: 'utf8' })
      .split('\n')
      .filter((f) => f.endsWith('.json'))
    expect(files.length).toBeGreaterThan(0)
    const named =
      /^bench\/results\/\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-(full|history-\d+-rows|history-retention|x402-capacity|x402-facilitator|features|websocket-sessions|mpp-[\w.-]+|(x402|identity)-(before|after)[\w.-]*)\.json$/
    expect(files.filter((f) => !named.test(f))).toEqual([])
  })

  it('names a run by what it is', () => {
    const at = new Date('2026-11-25T10:11:12.345Z')
    expect(resultsName(at, { full: true, scenarios: [] })).toBe('2026-11-25T10-11-12-full.json')
    expect(resultsName(at, { full: false, scenarios: ['direct', 'x402'] })).toBe(
      '2026-11-25T10-11-12-partial-x402.json',
    )
    expect(resultsName(at, { full: false, label: 'x402 after/abc', scenarios: ['x402'] })).toBe(
      '2026-11-25T10-11-12-x402-after-abc.json',
    )
  })
})
