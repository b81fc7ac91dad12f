// The start-up check of the batch-settlement contracts: what it accepts and what it refuses.
import { createPublicClient, getAddress, http } from 'viem'
import { describe, expect, it } from 'vitest'
import {
  BATCH_SETTLEMENT_ADDRESS,
  checkBatchContracts,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
} from '../../src/chain/batch-channel.ts'
import { chainClients } from '../helpers/accounts.ts'

const { rpcUrl, usdc } = chainClients()
const publicClient = createPublicClient({ transport: http(rpcUrl) })

describe('batch-settlement contracts at start-up', () => {
  it('accepts the contracts at the addresses the published client expects', async () => {
    const chainId = await publicClient.getChainId()
    expect(await checkBatchContracts(publicClient, { chainId, withdrawDelay: 900 })).toEqual({ ok: true })
  })

  it('refuses an address with no code, another contract, another chain id and a refused withdraw delay', async () => {
    const chainId = await publicClient.getChainId()
    const empty = getAddress('0x00000000000000000000000000000000000badc0')
    const noCode = await checkBatchContracts(publicClient, {
      chainId,
      withdrawDelay: 900,
      addresses: { channel: empty, collector: ERC3009_DEPOSIT_COLLECTOR_ADDRESS },
    })
    expect(noCode).toEqual({ ok: false, reason: `no code at the channel contract ${empty}` })
    // The test USDC holds code but does not answer the channel ABI.
    const other = await checkBatchContracts(publicClient, {
      chainId,
      withdrawDelay: 900,
      addresses: { channel: getAddress(usdc), collector: ERC3009_DEPOSIT_COLLECTOR_ADDRESS },
    })
    expect(other.ok).toBe(false)
    expect(!other.ok && other.reason).toContain('does not answer the batch-settlement ABI')
    // Vouchers signed for another chain id would never verify on this contract.
    const wrongChain = await checkBatchContracts(publicClient, { chainId: chainId + 1, withdrawDelay: 900 })
    expect(wrongChain).toEqual({
      ok: false,
      reason: `the channel contract ${BATCH_SETTLEMENT_ADDRESS} computes another channel id (EIP-712 domain or types differ)`,
    })
    const delay = await checkBatchContracts(publicClient, { chainId, withdrawDelay: 60 })
    expect(delay.ok).toBe(false)
  })
})
