// A proof sent right after broadcast, before it is mined: the call waits (up to verify.wait_ms) and succeeds
// once mined. Uses a private anvil, since turning automine off would stall every other test file's chain.

import { createWalletClient, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { loadConfig } from '../../src/config/load.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { mine, setAutomine, startTestChain } from '../helpers/anvil.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

let chain: DevChain
let svc: Service
let upstream: Awaited<ReturnType<typeof startUpstream>>

beforeAll(async () => {
  chain = await startTestChain()
  upstream = await startUpstream()
  const databaseUrl = await freshDatabaseUrl()
  const config = loadConfig({
    env: {
      NODE_ENV: 'test',
      RPC_URL: chain.rpcUrl,
      USDC_ADDRESS: chain.usdcAddress,
      TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    },
    overrides: { database: { data_dir: 'memory://' }, verify: { wait_ms: 5_000 } },
  })
  svc = await startService(config, { logger: createLogger('warn') })
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('a proof not mined yet', () => {
  it('is waited for and the call succeeds once it is mined', async () => {
    const reg = await callApi(svc.url, '/api/v1/register', {
      body: { wallet_address: chain.payers[4]!.address, business_name: 'Pending Co' },
    })
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: reg.body.api_key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    const payer = privateKeyToAccount(chain.payers[0]!.privateKey)
    const wallet = createWalletClient({ account: payer, transport: http(chain.rpcUrl) })
    await setAutomine(chain.rpcUrl, false)
    try {
      const hash = await wallet.writeContract({
        address: chain.usdcAddress,
        abi: parseAbi(['function transfer(address to, uint256 value) returns (bool)']),
        functionName: 'transfer',
        args: [svc.chain.treasury, 10_000n],
        gas: 100_000n,
        chain: null,
      })
      const before = upstream.count()
      const started = Date.now()
      const call = fetch(ep.body.metered_url, { headers: { 'x-payment': hash } })
      // The request is waiting on the chain, not answered and not forwarded: a fixed wait on purpose, what is
      // checked is that nothing happens while the transaction is unmined.
      await new Promise((r) => setTimeout(r, 700))
      expect(upstream.count()).toBe(before)
      await mine(chain.rpcUrl)
      const r = await call
      expect(r.status).toBe(200)
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(upstream.count()).toBe(before + 1)
    } finally {
      await setAutomine(chain.rpcUrl, true)
    }
  })
})
