// The alert rules are valid and their `promtool test rules` unit tests pass (deploy/alerts.test.yml).
import { execFileSync, spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

const DEPLOY = join(import.meta.dirname, '../../deploy')

/** promtool ships with Debian's `prometheus` package (apt-get install prometheus); CI installs it. */
function hasPromtool(): boolean {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

const promtool = hasPromtool()
if (!promtool) {
  console.warn(
    '[test/deploy/alerts] skipped: promtool is not on PATH. Install it with `apt-get install -y prometheus` (Debian/Ubuntu) or from https://prometheus.io/download/ to check deploy/alerts.yml.',
  )
}

describe.skipIf(!promtool)('Prometheus alert rules (promtool)', () => {
  it('deploy/alerts.yml is valid', () => {
    const r = spawnSync('promtool', ['check', 'rules', join(DEPLOY, 'alerts.yml')], {
      encoding: 'utf8',
      timeout: 30_000,
    })
    expect(r.stdout + r.stderr).toMatch(/SUCCESS: \d+ rules found/)
    expect(r.status).toBe(0)
  })

  it('every alert fires on its unit-test series and stays quiet on the others', () => {
    const r = spawnSync('promtool', ['test', 'rules', join(DEPLOY, 'alerts.test.yml')], {
      encoding: 'utf8',
      timeout: 60_000,
    })
    expect(r.status, r.stdout + r.stderr).toBe(0)
    expect(r.stdout).toContain('SUCCESS')
  })

  it('every alert rule has a unit test', () => {
    const rules = [...readFileSync(join(DEPLOY, 'alerts.yml'), 'utf8').matchAll(/- alert: (\w+)/g)].map(
      (m) => m[1],
    )
    const tests = readFileSync(join(DEPLOY, 'alerts.test.yml'), 'utf8')
    expect(rules.length).toBeGreaterThanOrEqual(10)
    for (const name of rules) expect(tests, name).toMatch(new RegExp(`alertname: ${name}\\n`))
  })
})
