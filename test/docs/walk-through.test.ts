// The README's five-minute walk-through, run as written: its terminal-1 block starts the service (npm ci
// aside: node_modules is linked), its terminal-2 block runs in bash, and what the README says to look for is
// what comes out. Then the two sections that go on in terminal 2 (usage-based pricing, paid MCP tools), each
// after the walk-through's own lines that define json, HOST, API and AUTH (a fresh merchant each). In a
// temporary copy of the repository, so the service's .data/ and dist/ never land in the checkout; free ports
// in PORT, DEMO_PORT, ADMIN_PORT, DEMO_LLM_PORT, DEMO_MCP_PORT and DEMO_REALTIME_PORT (the README's own way to
// move off taken ports). docs/websockets.md's walk-through (a Realtime session) runs the same way.
import { type ChildProcess, spawn } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { waitFor } from '../helpers/wait-for.ts'

const ROOT = join(import.meta.dirname, '../..')

const README = readFileSync(join(ROOT, 'README.md'), 'utf8')

/** The sh blocks of a section of the README (or of another page), in order. */
function shBlocks(heading: string, page = README): string[] {
  const start = page.indexOf(`\n${heading}\n`)
  if (start < 0) throw new Error(`no section ${heading}`)
  const section = page.slice(start, page.indexOf('\n## ', start + 1))
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!)
}

/**
 * bash -c script in its own process group, so what it leaves running in the background (demo servers: npm,
 * tsx and node under them) is stopped with it by that one id, whatever npm does with signals.
 */
function runBash(
  script: string,
  timeoutMs: number,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', script], { cwd: app, env, detached: true })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (b) => {
      stdout += b
    })
    child.stderr.on('data', (b) => {
      stderr += b
    })
    const stopGroup = () => {
      try {
        process.kill(-child.pid!, 'SIGTERM')
      } catch {}
    }
    const timer = setTimeout(() => {
      stderr += `\n(killed after ${timeoutMs} ms)`
      stopGroup()
    }, timeoutMs)
    // Not 'close': a background job holding the pipes open would keep it from coming.
    child.on('exit', (status) => {
      clearTimeout(timer)
      stopGroup()
      // The pipes' last bytes, after the exit.
      setTimeout(() => resolve({ status, stdout, stderr }), 200)
    })
  })
}

/**
 * A free port below Linux's ephemeral range (32768+): the demo servers bind theirs minutes after this is
 * chosen, and a port the OS hands out to another test's listener on port 0 meanwhile would be taken.
 */
const chosenPorts = new Set<number>()
async function freePort(): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000)
    if (chosenPorts.has(port)) continue
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer()
        .once('error', () => resolve(false))
        .listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
    })
    if (free) {
      chosenPorts.add(port)
      return port
    }
  }
}

const blocks = shBlocks('## Five-minute walk-through')
/** The walk-through's terminal-2 lines a following section needs: json(), HOST/API, a merchant's KEY, AUTH. */
const prelude = blocks[1]!
  .split('\n')
  .filter((l) => /^(json\(\)|HOST=|KEY=|AUTH=)/.test(l))
  .join('\n')
const app = mkdtempSync(join(tmpdir(), 'tollgate-walk-'))
let service: ChildProcess | null = null
let serviceLog = ''
let env: NodeJS.ProcessEnv

beforeAll(async () => {
  for (const f of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'config', 'scripts'])
    cpSync(join(ROOT, f), join(app, f), { recursive: true })
  symlinkSync(join(ROOT, 'node_modules'), join(app, 'node_modules'), 'dir')
  const [port, demo, admin, llm, mcp, realtime] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ]
  env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: `${port}`,
    DEMO_PORT: `${demo}`,
    ADMIN_PORT: `${admin}`,
    DEMO_LLM_PORT: `${llm}`,
    DEMO_MCP_PORT: `${mcp}`,
    DEMO_REALTIME_PORT: `${realtime}`,
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

/** Whether any process of the group led by `pgid` is still alive: signal 0 tests without sending. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0)
    return true
  } catch {
    return false
  }
}

afterAll(async () => {
  if (service?.pid) {
    const pgid = service.pid
    // The whole group, not only `sh`: sh exits on SIGTERM at once while node still closes its embedded
    // database, writing into .data; removing the directory under it fails with ENOTEMPTY.
    if (groupAlive(pgid)) process.kill(-pgid, 'SIGTERM')
    await waitFor(() => !groupAlive(pgid), { what: 'the service group to stop', timeoutMs: 20_000 }).catch(
      () => {
        if (groupAlive(pgid)) process.kill(-pgid, 'SIGKILL')
      },
    )
    await waitFor(() => !groupAlive(pgid), {
      what: 'the killed service group to go',
      timeoutMs: 5_000,
    }).catch(() => {})
  }
  rmSync(app, { recursive: true, force: true })
})

describe('README walk-through', () => {
  it('runs as written and shows what the README says to look for', async () => {
    // Terminal 2, as written; the demo server it starts in the background is stopped at its end.
    const r = await runBash(`${blocks[1]}\nkill $(jobs -p) 2>/dev/null; true\n`, 150_000)
    const out = r.stdout
    const context = `stdout:\n${out}\nstderr:\n${r.stderr}\nservice:\n${serviceLog.slice(-3000)}`
    expect(r.status, context).toBe(0)
    const lines = out.split('\n')
    expect(lines, context).toContain('payment_required')
    // The listed endpoint, as /discovery/resources shows it: its metered URL.
    expect(out, context).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/m\/ep_\w+$/m)
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

  it('usage-based pricing: the stream is sold per token, charged what it used, the rest refunded', async () => {
    expect(prelude.split('\n')).toHaveLength(4)
    const [section] = shBlocks('## Usage-based pricing')
    const r = await runBash(`${prelude}\n${section}`, 55_000)
    const out = r.stdout
    const context = `stdout:\n${out}\nstderr:\n${r.stderr}\nservice:\n${serviceLog.slice(-3000)}`
    expect(r.status, context).toBe(0)
    const lines = out.split('\n')
    expect(lines, context).toContain('demo')
    // The stream's end as the client asked for it: no usage chunk, no "usage": null, then [DONE].
    expect(lines, context).toContain('data: [DONE]')
    expect(out, context).toMatch(/^data: \{.*"finish_reason":"stop"/m)
    expect(
      lines.filter((l) => l.startsWith('data: ') && l.includes('"usage"')),
      context,
    ).toEqual([])
    // 4 prompt words at $2 per million (2 base units each), 1,000 words at $10 per million (10 each).
    expect(out, context).toMatch(/input_tokens: 4,/)
    expect(out, context).toMatch(/output_tokens: 1000\b/)
    expect(out, context).toContain("charge_atomic: '10008'")
    expect(out, context).toContain("ceiling_atomic: '50000'")
    expect(out, context).toContain("refunded_atomic: '39992'")
    expect(out, context).toContain("source: 'measured'")
  }, 60_000)

  it('docs/websockets.md walk-through: a Realtime session sold per token, charged what it delivered', async () => {
    const page = readFileSync(join(ROOT, 'docs', 'websockets.md'), 'utf8')
    const [section] = shBlocks('## Walk-through: a Realtime-shaped model, paid per token', page)
    const r = await runBash(`${prelude}\n${section}\nkill $(jobs -p) 2>/dev/null; true\n`, 55_000)
    const out = r.stdout
    const context = `stdout:\n${out}\nstderr:\n${r.stderr}\nservice:\n${serviceLog.slice(-3000)}`
    expect(r.status, context).toBe(0)
    // The client's response.done usage, then the session's row: 8 input tokens at 2, 2 cached at 1, 1,000
    // output tokens at 10 base units each.
    expect(out, context).toMatch(/output_tokens: 1000\b/)
    expect(out, context).toContain("charge_atomic: '10018'")
    expect(out, context).toContain("ended_by: 'client'")
    expect(out, context).toContain('payments: 1')
  }, 60_000)

  it('paid MCP tools: the SDK client lists free, pays the priced tool, the call is booked by tool', async () => {
    const [section] = shBlocks('## Paid MCP tools')
    const r = await runBash(`${prelude}\n${section}`, 55_000)
    const out = r.stdout
    const context = `stdout:\n${out}\nstderr:\n${r.stderr}\nservice:\n${serviceLog.slice(-3000)}`
    expect(r.status, context).toBe(0)
    expect(out, context).toMatch(/^echo\s+free$/m)
    expect(out, context).toMatch(/^weather\s+\$0\.01 a call$/m)
    // One payment, of the tool's price, before its answer.
    expect(out.match(/^paid /gm), context).toHaveLength(1)
    expect(out, context).toMatch(/^paid 10000 base units: 0x[0-9a-f]{64}\nweather: Lyon: .+ °C$/m)
    expect(out.split('\n'), context).toContain('weather 10000')
  }, 60_000)
})
