// Payers of x402 `upto` on the shared test chain: a funded key that approved Permit2 once (as the published
// client's createPermit2ApprovalTx asks), and the published UptoEvmScheme client's permit for a 402's terms.
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { UptoEvmScheme } from '@x402/evm/upto/client'
import { type Address, createWalletClient, type Hex, http, maxUint256, parseAbi } from 'viem'
import { expect, inject } from 'vitest'
import { PERMIT2_ADDRESS, type StoredUptoPermit, storedUptoPermit } from '../../src/chain/upto-permit.ts'
import { chainClients, type Funded, fundedAccount } from './accounts.ts'
import type { TestService } from './service.ts'

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

/** The published upto client as a payer configures it: the test USDC is not a default asset, so it is allowed. */
export function publishedUptoClient(s: TestService, payer: Funded): x402Client {
  const network = `eip155:${s.chain.chainId}` as const
  return x402Client.fromConfig({
    schemes: [{ network, client: new UptoEvmScheme(payer.account) }],
    spendControls: { allowedAssets: [{ network, asset: s.chain.usdc.address }] },
  })
}

/**
 * The published upto client's payment header (a fresh Permit2 nonce each) for the 402 that instance `s`
 * answers at `url` to a JSON POST of `body`, and the requirements it signed for.
 */
export async function publishedUptoHeader(s: TestService, url: string, body: string, payer: Funded) {
  const client = new x402HTTPClient(publishedUptoClient(s, payer))
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json' } })
  expect(r.status).toBe(402)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const header = client.encodePaymentSignatureHeader(await client.createPaymentPayload(required))
  return { header, required }
}
