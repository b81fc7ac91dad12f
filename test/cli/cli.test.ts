// The CLIs as a user runs them (tsx src/cli/…): --help, usage errors with exit 2, `pay` finding the dev chain
// through the file npm start writes (no RPC_URL), and `reconcile` asking the running service when the
// embedded database is held by it.
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import type { Hex } from 'viem'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { hasUptoBatcher, uptoBatcherAddress } from '../../src/chain/upto-settle.ts'
import { type DevChainFile, writeDevChainFile } from '../../src/cli/dev-chain-file.ts'
import { chainClients, erc20, type Funded, fundedAccount } from '../helpers/accounts.ts'
import { startTestService, type TestService } from '../helpers/service.ts'

const ROOT = join(import.meta.dirname, '..', '..')
const dir = mkdtempSync(join(tmpdir(), 'tollgate-cli-'))
const FILE = join(dir, 'dev-chain.json')

async function run(cli: string, args: string[], env: Record<string, string> = {}) {
  const clean = { ...process.env }
  for (const k of ['RPC_URL', 'USDC_ADDRESS', 'PAYER_KEY', 'DATABASE_URL']) delete clean[k]
  return promisify(execFile)(join(ROOT, 'node_modules', '.bin', 'tsx'), [`src/cli/${cli}.ts`, ...args], {
    cwd: ROOT,
    env: { ...clean, NODE_ENV: 'test', TOLLGATE_DEV_CHAIN_FILE: FILE, ...env },
  }).then(
    (r) => ({ code: 0, out: r.stdout, err: r.stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: e.stdout, err: e.stderr }),
  )
}

let svc: TestService
const ADMIN_TOKEN = 'cli-test-admin-token-0123456789'
let payer: Funded

beforeAll(async () => {
  ;[svc, payer] = await Promise.all([
    startTestService({ adminToken: ADMIN_TOKEN }),
    fundedAccount(5_000_000n),
  ])
})
afterAll(async () => {
  await svc?.stop()
  rmSync(dir, { recursive: true, force: true })
})

function devChainFile(over: Partial<DevChainFile> = {}): DevChainFile {
  return {
    rpc_url: inject('rpcUrl'),
    chain_id: inject('chainId'),
    usdc_address: inject('usdcAddress'),
    treasury: svc.chain.treasury,
    payer: { address: payer.address, private_key: payer.privateKey },
    api_url: svc.url,
    admin_url: `http://127.0.0.1:${svc.adminPort}`,
    admin_token: ADMIN_TOKEN,
    database: 'embedded',
    pid: process.pid,
    written_at: new Date().toISOString(),
    ...over,
  }
}

describe('npm run pay', () => {
  it('--help exits 0; a bad option or no target exits 2 with the usage', async () => {
    const help = await run('pay', ['--help'])
    expect([help.code, help.out]).toEqual([0, expect.stringContaining('usage: npm run pay')])
    const bad = await run('pay', ['--nope'])
    expect(bad.code).toBe(2)
    expect(bad.err).toContain('usage: npm run pay')
    expect((await run('pay', [])).code).toBe(2)
  })

  it('without the file npm start writes and without RPC_URL, says what to do and exits 1', async () => {
    rmSync(FILE, { force: true })
    const r = await run('pay', [svc.chain.treasury, '0.01'])
    expect(r.code).toBe(1)
    expect(r.err).toMatch(/start the service with npm start .*dev-chain\.json.*or set RPC_URL/)
  })

  it('a stale file (its process gone) is ignored', async () => {
    writeDevChainFile(devChainFile({ pid: 2 ** 22 + 17 }), FILE)
    expect((await run('pay', [svc.chain.treasury, '0.01'])).err).toMatch(/no RPC URL/)
  })

  it('a URL that cannot be reached says what failed, not just "fetch failed"', async () => {
    writeDevChainFile(devChainFile(), FILE)
    // A port just closed: nothing listens there.
    const closed = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, '127.0.0.1', () => {
        const { port } = server.address() as AddressInfo
        server.close(() => resolve(port))
      })
    })
    const r = await run('pay', [`http://127.0.0.1:${closed}/m/ep_x`])
    expect(r.code).toBe(1)
    expect(r.err).toBe(`pay: cannot reach http://127.0.0.1:${closed}/m/ep_x: ECONNREFUSED\n`)
  })

  it('pays from the payer in the file, to the RPC in the file, and prints the hash', async () => {
    writeDevChainFile(devChainFile(), FILE)
    const r = await run('pay', [svc.chain.treasury, '0.02'])
    expect(r.code, r.err).toBe(0)
    const hash = r.out.trim() as Hex
    expect(hash).toMatch(/^0x[0-9a-f]{64}$/)
    const { publicClient, usdc } = chainClients()
    const receipt = await publicClient.getTransactionReceipt({ hash })
    expect(receipt.from.toLowerCase()).toBe(payer.address.toLowerCase())
    expect(
      await publicClient.readContract({
        address: usdc,
        abi: erc20,
        functionName: 'balanceOf',
        args: [payer.address],
      }),
    ).toBe(4_980_000n)
  })
})

describe('npm run reconcile', () => {
  it('--help exits 0; an unknown option exits 2', async () => {
    expect((await run('reconcile', ['-h'])).code).toBe(0)
    const bad = await run('reconcile', ['--since', '1h'])
    expect(bad.code).toBe(2)
    expect(bad.err).toContain('usage: npm run reconcile')
  })

  it('asks the running service when it holds the embedded database', async () => {
    writeDevChainFile(devChainFile(), FILE)
    const r = await run('reconcile', [], { TREASURY_PRIVATE_KEY: svc.treasury.privateKey })
    expect(r.out).toContain('OK: no difference')
    expect(r.code).toBe(0)
    const ranged = await run('reconcile', ['--from', '1h'])
    expect(ranged.code).toBe(2)
    expect(ranged.err).toMatch(/--from\/--to need the database/)
  })
})

describe('npm run deploy:batcher', () => {
  it('--help exits 0; an unknown option exits 2 with the usage', async () => {
    expect((await run('deploy-batcher', ['--help'])).code).toBe(0)
    const bad = await run('deploy-batcher', ['--force'])
    expect(bad.code).toBe(2)
    expect(bad.err).toContain('usage: npm run deploy:batcher')
  })

  it('finds the AuthorizationBatcher the dev chain already has, and says so', async () => {
    writeDevChainFile(devChainFile(), FILE)
    const r = await run('deploy-batcher', [], { TREASURY_PRIVATE_KEY: svc.treasury.privateKey })
    expect(r.out).toMatch(/AuthorizationBatcher 0x[0-9a-fA-F]{40} on chain \d+: already deployed/)
    expect(r.code).toBe(0)
  })

  it("--upto deploys the treasury's UptoSettlementBatcher at its CREATE2 address once", async () => {
    writeDevChainFile(devChainFile(), FILE)
    const treasury = await fundedAccount(0n)
    const env = { TREASURY_PRIVATE_KEY: treasury.privateKey }
    const first = await run('deploy-batcher', ['--upto'], env)
    expect(first.out).toContain(`UptoSettlementBatcher ${uptoBatcherAddress(treasury.address)}`)
    expect(first.out).toMatch(/: deployed in 0x[0-9a-f]{64}/)
    // The settler slots derived from the treasury key may settle through it (upto before the answer).
    expect(first.out).toMatch(/settler slots: \d+ of \d+ named delegates in 0x[0-9a-f]{64}/)
    expect(first.code).toBe(0)
    expect(await hasUptoBatcher(chainClients().publicClient, treasury.address)).toBe(true)
    const again = await run('deploy-batcher', ['--upto'], env)
    expect(again.out).toMatch(/: already deployed/)
    expect(again.out).toMatch(/settler slots: all \d+ already delegates/)
    expect(again.code).toBe(0)
  })
})
