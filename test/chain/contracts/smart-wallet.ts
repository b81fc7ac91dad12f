// TestSmartWallet, a test fixture: an ERC-1271 contract wallet owned by one key, to pay x402 calls with a
// contract signature (built by `npm run build:contracts`). The service never deploys it.
import {
  type Address,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  maxUint256,
  numberToHex,
  parseAbi,
  publicActions,
} from 'viem'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import type { Artifact } from '../../../src/chain/contracts/artifacts.ts'
import { PERMIT2_ADDRESS } from '../../../src/chain/upto-permit.ts'
import testSmartWalletJson from './test-smart-wallet.artifact.json' with { type: 'json' }

export const testSmartWalletArtifact = testSmartWalletJson as unknown as Artifact

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

/**
 * A TestSmartWallet owned by a fresh key, deployed by `funderKey` on the chain at `rpcUrl` (any id) and funded
 * by it with `amountAtomic` USDC. The wallet's address pays; its owner's key signs.
 */
export async function fundedSmartWallet(q: {
  rpcUrl: string
  usdc: Address
  funderKey: Hex
  amountAtomic: bigint
}): Promise<{ wallet: Address; owner: PrivateKeyAccount }> {
  const owner = privateKeyToAccount(generatePrivateKey())
  const funder = createWalletClient({
    account: privateKeyToAccount(q.funderKey),
    transport: http(q.rpcUrl),
    pollingInterval: 50,
  }).extend(publicActions)
  const deployed = await funder.waitForTransactionReceipt({
    hash: await funder.deployContract({
      abi: testSmartWalletArtifact.abi,
      bytecode: testSmartWalletArtifact.bytecode as Hex,
      args: [owner.address],
      chain: null,
    }),
  })
  const wallet = deployed.contractAddress!
  await funder.waitForTransactionReceipt({
    hash: await funder.writeContract({
      address: q.usdc,
      abi: transferAbi,
      functionName: 'transfer',
      args: [wallet, q.amountAtomic],
      chain: null,
    }),
  })
  return { wallet, owner }
}

/**
 * The wallet approves Permit2 for its USDC itself, as its owner would through a call of the wallet's: the
 * node sends the approval from the wallet's address (anvil's impersonation; TestSmartWallet has no execute
 * function). What an upto payer needs once, as an EOA payer's approve.
 */
export async function approvePermit2From(q: {
  rpcUrl: string
  usdc: Address
  wallet: Address
}): Promise<void> {
  const client = createPublicClient({ transport: http(q.rpcUrl), pollingInterval: 50 })
  await client.request({ method: 'anvil_impersonateAccount' as never, params: [q.wallet] as never })
  await client.request({
    method: 'anvil_setBalance' as never,
    params: [q.wallet, numberToHex(10n ** 18n)] as never,
  })
  try {
    const sender = createWalletClient({ account: q.wallet, transport: http(q.rpcUrl) })
    const hash = await sender.writeContract({
      address: q.usdc,
      abi: parseAbi(['function approve(address spender, uint256 value) returns (bool)']),
      functionName: 'approve',
      args: [PERMIT2_ADDRESS, maxUint256],
      chain: null,
    })
    const mined = await client.waitForTransactionReceipt({ hash })
    if (mined.status !== 'success') throw new Error(`the wallet's approval of Permit2 reverted: ${hash}`)
  } finally {
    await client.request({ method: 'anvil_stopImpersonatingAccount' as never, params: [q.wallet] as never })
  }
}
