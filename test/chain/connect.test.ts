// Start-up of the chain side: the context it builds, and the mistakes it refuses with a stable code.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connectChain } from '../../src/chain/connect.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { DeepPartial } from '../../src/config/load.ts'
import { loadConfig } from '../../src/config/load.ts'
import type { Settings } from '../../src/config/schema.ts'
import { startTestChain } from '../helpers/anvil.ts'

let dev: DevChain

beforeAll(async () => {
  dev = await startTestChain()
})

afterAll(async () => {
  await dev?.stop()
})

const ANVIL_KEY_9 = '0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6'

// No state file: a dev chain started here must not write .data/anvil-state.json into the checkout (a later
// `npm start` would find a chain that does not match its database and stop on TOLLGATE_CHAIN_MISMATCH).
function config(chain: DeepPartial<Settings['chain']>, env: Record<string, string> = {}) {
  return loadConfig({
    env,
    overrides: { chain: { rpc_timeout_ms: 2000, ...chain }, local_chain: { state_file: null } },
  })
}

describe('connectChain', () => {
  it('describes the local chain it is handed: ids, treasury, USDC domain', async () => {
    const chain = await connectChain(config({ network: 'local' }), { devChain: dev })
    try {
      expect(chain).toMatchObject({
        network: 'local',
        chainId: 31337,
        caip2: 'eip155:31337',
        x402Network: 'local',
        treasury: dev.treasury.address,
        usdc: { address: dev.usdcAddress, decimals: 6, name: 'USD Coin', version: '2' },
        explorerUrl: null,
        rpcUrl: dev.rpcUrl,
        devChain: dev,
      })
      expect(chain.walletClient.account.address).toBe(dev.treasury.address)
      expect(await chain.publicClient.getChainId()).toBe(31337)
    } finally {
      await chain.close()
    }
    // Handed in, so not ours to stop.
    expect(() => process.kill(dev.pid, 0)).not.toThrow()
  })

  it('uses an existing local chain with its USDC address and the treasury key from the environment', async () => {
    const chain = await connectChain(
      config(
        { network: 'local', rpc_url: dev.rpcUrl, usdc_address: dev.usdcAddress.toLowerCase() },
        {
          TREASURY_PRIVATE_KEY: ANVIL_KEY_9,
        },
      ),
    )
    expect(chain.treasury).toBe('0xa0Ee7A142d267C1f36714E4a8F75612F20a79720')
    expect(chain.usdc.address).toBe(dev.usdcAddress)
    expect(chain.devChain).toBeNull()
    await chain.close()
  })

  it('starts its own dev chain on local without RPC_URL, and stops it on close()', async () => {
    const chain = await connectChain(config({ network: 'local', dev_payers: 2, dev_payer_funding: 5 }))
    const dev2 = chain.devChain!
    expect(dev2.payers).toHaveLength(2)
    expect(chain.rpcUrl).toBe(dev2.rpcUrl)
    await chain.close()
    expect(() => process.kill(dev2.pid, 0)).toThrow()
  })

  it('refuses a local RPC_URL without USDC_ADDRESS', async () => {
    await expect(connectChain(config({ network: 'local', rpc_url: dev.rpcUrl }))).rejects.toMatchObject({
      code: 'TOLLGATE_CHAIN_USDC_ADDRESS_REQUIRED',
    })
  })

  it('refuses an RPC_URL that serves another chain than NETWORK', async () => {
    const err = await connectChain(
      config({ network: 'base', rpc_url: dev.rpcUrl }, { TREASURY_PRIVATE_KEY: ANVIL_KEY_9 }),
    ).catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'TOLLGATE_CHAIN_ID_MISMATCH' })
    expect((err as Error).message).toMatch(/chain 31337 but NETWORK=base is chain 8453/)
    expect((err as Error).message).not.toContain(ANVIL_KEY_9.slice(2))
  })

  it('refuses a USDC_ADDRESS that is not a readable token', async () => {
    // A payer's own address: no code there, so nothing answers name() or decimals().
    await expect(
      connectChain(config({ network: 'local', usdc_address: dev.payers[0]!.address }), { devChain: dev }),
    ).rejects.toMatchObject({ code: 'TOLLGATE_CHAIN_USDC_UNREADABLE' })
  })

  it('refuses an RPC endpoint that does not answer', async () => {
    await expect(
      connectChain(
        config({ network: 'local', rpc_url: 'http://127.0.0.1:9', usdc_address: dev.usdcAddress }),
      ),
    ).rejects.toMatchObject({ code: 'TOLLGATE_CHAIN_RPC_UNREACHABLE' })
  })
})
