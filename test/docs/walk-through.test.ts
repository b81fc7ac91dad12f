// The README's five-minute walk-through, run as written: its terminal-1 block starts the service (npm ci
// aside: node_modules is linked), its terminal-2 block runs in bash, and what the README says to look for is
// what comes out. In a temporary copy of the repository, so the service's .data/ and dist/ never land in the
// checkout; free ports in PORT, DEMO_PORT and ADMIN_PORT (the README's own way to move off taken ports).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { waitFor } from '../helpers/wait-for.ts'

const ROOT = join(import.meta.dirname, '../..')

/** The sh blocks of the README's walk-through section, in order. */
function walkThroughBlocks(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const start = readme.indexOf('## Five-minute walk-through')
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1))
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!)
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

const blocks = walkThroughBlocks()
const app = mkdtempSync(join(tmpdir(), 'tollgate-walk-'))
let service: ChildProcess | null = null
let serviceLog = ''
let env: NodeJS.ProcessEnv

beforeAll(async () => {
  for (const f of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'config', 'scripts'])
    cpSync(join(ROOT, f), join(app, f), { recursive: true })
  symlinkSync(join(ROOT, 'node_modules'), join(app, 'node_modules'), 'dir')
  const [port, demo, admin] = [await freePort(), await freePort(), await freePort()]
  env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: `${port}`,
    DEMO_PORT: `${demo}`,
    ADMIN_PORT: `${admin}`,
  }
  // Terminal 1, as written; `npm ci` is what the linked node_modules stands for.
  const terminal1 = blocks[0]!
    .split('\n')
    .filter((l) => l.trim() && l.trim() !== 'npm ci')
    .join('\n')
  expect(terminal1).toBe('TOLLGATE_CONFIG=config/demo.json npm start')
  // Its own process group, so the whole tree (npm, sh, node, anvil) is stopped by this one id.
  service = spawn('sh', ['-c', terminal1], { cwd: app, env, detached: true })
  service.stdout!.on('data', (b) => {
    serviceLog += b
  })
  service.stderr!.on('data', (b) => {
    serviceLog += b
  })
  await waitFor(
    async () => {
      if (service!.exitCode !== null) throw new Error(`npm start exited ${service!.exitCode}:\n${serviceLog}`)
      const r = await fetch(`http://127.0.0.1:${port}/api/v1/openapi.json`).catch(() => null)
      return r?.ok ?? null
    },
    { what: () => `npm start to serve (log so far:\n${serviceLog})`, timeoutMs: 150_000, intervalMs: 500 },
  )
}, 180_000)

afterAll(async () => {
  if (service?.pid && service.exitCode === null) {
    process.kill(-service.pid, 'SIGTERM')
    await waitFor(() => service!.exitCode !== null || service!.signalCode !== null, {
      what: 'the service to stop',
      timeoutMs: 20_000,
    }).catch(() => process.kill(-service!.pid!, 'SIGKILL'))
  }
  rmSync(app, { recursive: true, force: true })
})

describe('README walk-through', () => {
  it('runs as written and shows what the README says to look for', () => {
    // Terminal 2, as written; the demo server it starts in the background is stopped at its end.
    const script = `${blocks[1]}\nkill $(jobs -p) 2>/dev/null; true\n`
    const r = spawnSync('bash', ['-c', script], { cwd: app, env, encoding: 'utf8', timeout: 150_000 })
    const out = r.stdout
    const context = `stdout:\n${out}\nstderr:\n${r.stderr}\nservice:\n${serviceLog.slice(-3000)}`
    expect(r.status, context).toBe(0)
    const lines = out.split('\n')
    expect(lines, context).toContain('payment_required')
    expect(lines, context).toContain('{"hello":"world"}')
    expect(lines, context).toContain('proof_already_used')
    expect(lines, context).toContain('9500')
    expect(out, context).toMatch(/^whsec_\S+$/m)
    expect(lines, context).toContain('pending')
    expect(lines, context).toContain('paid')
    expect(out, context).toMatch(/webhook v1,\S+ .*"type":"payment\.received"/)
    expect(out, context).toMatch(/payment\.received/)
    // One payout of the owner's shares: 95 % of 0.01 and of 1.5 (a batch every 10 s in config/demo.json).
    expect(out, context).toMatch(/^(confirmed|submitted|pending) 1\.4345 USDC 0x[0-9a-f]{64}$/m)
    expect(out, context).toContain('OK: no difference')
  }, 160_000)
})
