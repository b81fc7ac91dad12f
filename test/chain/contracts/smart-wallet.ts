// TestSmartWallet, a test fixture: an ERC-1271 contract wallet owned by one key, to pay x402 calls with a
// contract signature (built by `npm run build:contracts`). The service never deploys it.
import { type Address, type Chain, createWalletClient, type Hex, http, parseAbi, publicActions } from 'viem'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import type { Artifact } from '../../../src/chain/contracts/artifacts.ts'
import testSmartWalletJson from './test-smart-wallet.artifact.json' with { type: 'json' }

export const testSmartWalletArtifact = testSmartWalletJson as unknown as Artifact

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

/**
 * A TestSmartWallet owned by a fresh key, deployed by `funderKey` on the base-sepolia-id chain at `rpcUrl`
 * and funded by it with `amountAtomic` USDC. The wallet's address pays; its owner's key signs.
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
    chain: baseSepolia as Chain,
    transport: http(q.rpcUrl),
  }).extend(publicActions)
  const deployed = await funder.waitForTransactionReceipt({
    hash: await funder.deployContract({
      abi: testSmartWalletArtifact.abi,
      bytecode: testSmartWalletArtifact.bytecode as Hex,
      args: [owner.address],
    }),
  })
  const wallet = deployed.contractAddress!
  await funder.waitForTransactionReceipt({
    hash: await funder.writeContract({
      address: q.usdc,
      abi: transferAbi,
      functionName: 'transfer',
      args: [wallet, q.amountAtomic],
    }),
  })
  return { wallet, owner }
}
