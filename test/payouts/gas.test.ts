// Measures, on anvil, what the batcher's design choice costs: one USDC transfer per wallet versus one
// Disperse transaction for the batch (plus its one-time approve). Prints the numbers; asserts only sanity.
import { type Address, createWalletClient, encodeFunctionData, type Hash, http, parseAbi } from 'viem'
import { describe, expect, it } from 'vitest'
import { disperseArtifact } from '../chain/contracts/disperse.ts'
import { chainClients, erc20, fundedAccount } from '../helpers/accounts.ts'

const approveAbi = parseAbi(['function approve(address spender, uint256 value) returns (bool)'])

describe('payout gas on anvil', () => {
  it('transfers per wallet vs one Disperse transaction', async () => {
    const { rpcUrl, publicClient, usdc } = chainClients()
    const sender = await fundedAccount(1_000_000_000n)
    const wallet = createWalletClient({ account: sender.account, transport: http(rpcUrl) })
    const gasOf = async (hash: Hash) => (await publicClient.waitForTransactionReceipt({ hash })).gasUsed
    const deployHash = await wallet.deployContract({
      abi: disperseArtifact.abi,
      bytecode: disperseArtifact.bytecode,
      chain: null,
    })
    const disperse = (await publicClient.waitForTransactionReceipt({ hash: deployHash })).contractAddress!
    const approveGas = await gasOf(
      await wallet.writeContract({
        address: usdc,
        abi: approveAbi,
        functionName: 'approve',
        args: [disperse, 2n ** 255n],
        chain: null,
      }),
    )
    const fresh = async (n: number) =>
      Promise.all(Array.from({ length: n }, async () => (await fundedAccount(0n)).address))
    const rows: Array<{ wallets: number; transfers: bigint; disperse: bigint }> = []
    for (const n of [1, 3, 20]) {
      let transfers = 0n
      for (const to of await fresh(n)) {
        transfers += await gasOf(
          await wallet.writeContract({
            address: usdc,
            abi: erc20,
            functionName: 'transfer',
            args: [to, 1_000n],
            chain: null,
          }),
        )
      }
      const recipients: Address[] = await fresh(n)
      const data = encodeFunctionData({
        abi: disperseArtifact.abi,
        functionName: 'disperseToken',
        args: [usdc, recipients, recipients.map(() => 1_000n)],
      })
      const batch = await gasOf(await wallet.sendTransaction({ to: disperse, data, chain: null }))
      rows.push({ wallets: n, transfers, disperse: batch })
    }
    console.log(
      [
        `approve (once): ${approveGas} gas`,
        'wallets | N transfers (gas) | 1 disperse (gas) | disperse/transfers',
        ...rows.map(
          (r) =>
            `${r.wallets} | ${r.transfers} | ${r.disperse} | ${((Number(r.disperse) / Number(r.transfers)) * 100).toFixed(0)}%`,
        ),
      ].join('\n'),
    )
    expect(rows[2]!.disperse).toBeLessThan(rows[2]!.transfers)
  })
})
