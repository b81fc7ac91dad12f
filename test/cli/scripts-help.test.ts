// `npm run bench -- --help` and `npm run chaos -- --help` print their usage and exit at once (the chaos run
// used to start its 20 minutes, the bench to throw "unknown scenario"); a wrong argument is a usage error.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = join(import.meta.dirname, '../..')
const run = (script: string, args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 30_000,
    env: { ...process.env, npm_config_help: undefined },
  })

describe('script help', () => {
  it('bench: --help lists every mode, history included, and exits 0', () => {
    const r = run('bench/run.ts', ['--help'])
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/^usage: npm run bench/)
    for (const word of ['soak', 'recover', 'history', '--readme', 'paid-warm', 'BENCH_LABEL']) {
      expect(r.stdout).toContain(word)
    }
  })

  it('bench: an unknown scenario is a one-line usage error, no stack trace', () => {
    const r = run('bench/run.ts', ['no-such-scenario'])
    expect(r.status).toBe(2)
    expect(r.stderr).toMatch(/^bench: unknown scenario no-such-scenario; known: .*history/)
    expect(r.stderr).not.toContain('    at ')
  })

  it('chaos: --help prints usage and exits 0; an argument it does not know exits 2', () => {
    const help = run('test/chaos/run.ts', ['--help'])
    expect(help.status).toBe(0)
    expect(help.stdout).toMatch(/^usage: npm run chaos/)
    expect(help.stdout).toContain('CHAOS_PROOFS')
    const bad = run('test/chaos/run.ts', ['--proofs=5'])
    expect(bad.status).toBe(2)
    expect(bad.stderr).toContain('unknown argument --proofs=5')
  })
})
