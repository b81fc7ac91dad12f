// A database is bound to the chain it was made on: started against another chain it refuses, naming both.
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { startTestChain } from '../helpers/anvil.ts'
import { tempDir } from '../helpers/child-service.ts'
import { startTestService } from '../helpers/service.ts'

describe('database bound to its chain', () => {
  it('restarts on the same chain, refuses a fresh one with TOLLGATE_CHAIN_MISMATCH', async () => {
    const dataDir = join(tempDir(), 'pglite')
    const database = { data_dir: dataDir }
    const first = await startTestService({ databaseUrl: null, overrides: { database } })
    const treasury = first.treasury
    await first.stop()
    // Same chain, same database: fine.
    const again = await startTestService({ databaseUrl: null, treasury, overrides: { database } })
    const [row] = await again.sql<{ chain_id: number }[]>`SELECT chain_id FROM chain_binding`
    expect(row?.chain_id).toBe(again.chain.chainId)
    await again.stop()
    // A new dev chain with the same chain id and the same USDC address (same deployer, same nonces): only
    // the genesis block tells them apart.
    const other = await startTestChain({ payers: 0 })
    try {
      const err = await startTestService({
        databaseUrl: null,
        treasury,
        overrides: { database, chain: { rpc_url: other.rpcUrl, usdc_address: other.usdcAddress } },
      }).then(
        () => null,
        (e: Error & { code?: string }) => e,
      )
      expect(err?.code).toBe('TOLLGATE_CHAIN_MISMATCH')
      expect(err?.message).toMatch(/this database was made on chain \d+ \(genesis 0x[0-9a-f]{64}/)
    } finally {
      await other.stop()
    }
  })
})
