// Payers of x402 `upto` on the shared test chain: a funded key that approved Permit2 once (as the published
// client's createPermit2ApprovalTx asks), and the published UptoEvmScheme client's permit for a 402's terms.
import { UptoEvmScheme } from '@x402/evm/upto/client'
import { type Address, createWalletClient, type Hex, http, maxUint256, parseAbi } from 'viem'
import { inject } from 'vitest'
import { PERMIT2_ADDRESS, type StoredUptoPermit, storedUptoPermit } from '../../src/chain/upto-permit.ts'
import { chainClients, type Funded, fundedAccount } from './accounts.ts'

export async function approvedPayer(usdcAtomic = 10_000_000n): Promise<Funded> {
  const { rpcUrl, publicClient, usdc } = chainClients()
  const payer = await fundedAccount(usdcAtomic)
  const wallet = createWalletClient({ account: payer.account, transport: http(rpcUrl) })
  const hash = await wallet.writeContract({
    address: usdc,
    abi: parseAbi(['function approve(address spender, uint256 value) returns (bool)']),
    functionName: 'approve',
    args: [PERMIT2_ADDRESS, maxUint256],
    chain: null,
  })
  await publicClient.waitForTransactionReceipt({ hash })
  return payer
}

/** What the published client signs for `upto` up to `max`, paid to `payTo`, settled by `facilitator`. */
export async function publishedUptoPermit(
  payer: Funded,
  terms: { max: bigint; payTo: Address; facilitator: Address },
): Promise<StoredUptoPermit> {
  const { usdc } = chainClients()
  const client = new UptoEvmScheme(payer.account)
  const result = await client.createPaymentPayload(2, {
    scheme: 'upto',
    network: `eip155:${inject('chainId')}`,
    asset: usdc,
    amount: terms.max.toString(),
    payTo: terms.payTo,
    maxTimeoutSeconds: 300,
    extra: {
      facilitatorAddress: terms.facilitator,
      name: 'USD Coin',
      version: '2',
      assetTransferMethod: 'permit2',
    },
  })
  const { signature, permit2Authorization: a } = result.payload as {
    signature: Hex
    permit2Authorization: {
      from: Address
      permitted: { token: Address; amount: string }
      spender: Address
      nonce: string
      deadline: string
      witness: { to: Address; facilitator: Address; validAfter: string }
    }
  }
  return storedUptoPermit(
    {
      from: a.from,
      token: a.permitted.token,
      amount: BigInt(a.permitted.amount),
      spender: a.spender,
      nonce: BigInt(a.nonce),
      deadline: BigInt(a.deadline),
      to: a.witness.to,
      facilitator: a.witness.facilitator,
      validAfter: BigInt(a.witness.validAfter),
    },
    signature,
  )
}
