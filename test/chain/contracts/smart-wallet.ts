// TestSmartWallet, a test fixture: an ERC-1271 contract wallet owned by one key, to pay x402 calls with a
// contract signature (built by `npm run build:contracts`), deployed here or (counterfactual, ERC-6492) through
// TestSmartWalletFactory by whoever settles its first payment.
import {
  type Address,
  createPublicClient,
  createWalletClient,
  encodeFunctionData,
  type Hex,
  http,
  maxUint256,
  numberToHex,
  parseAbi,
  publicActions,
  serializeErc6492Signature,
  type TypedDataDefinition,
} from 'viem'
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import type { Artifact } from '../../../src/chain/contracts/artifacts.ts'
import { PERMIT2_ADDRESS } from '../../../src/chain/upto-permit.ts'
import testSmartWalletJson from './test-smart-wallet.artifact.json' with { type: 'json' }
import testSmartWalletFactoryJson from './test-smart-wallet-factory.artifact.json' with { type: 'json' }

export const testSmartWalletArtifact = testSmartWalletJson as unknown as Artifact
export const testSmartWalletFactoryArtifact = testSmartWalletFactoryJson as unknown as Artifact

const transferAbi = parseAbi(['function transfer(address to, uint256 value) returns (bool)'])

/** The key that deploys and funds the test wallets, as a client that also waits for its receipts. */
function funderClient(q: { rpcUrl: string; funderKey: Hex }) {
  return createWalletClient({
    account: privateKeyToAccount(q.funderKey),
    transport: http(q.rpcUrl),
    pollingInterval: 50,
  }).extend(publicActions)
}

/** `amountAtomic` of the token from the funder to `to`, mined. */
async function sendUsdc(
  funder: ReturnType<typeof funderClient>,
  usdc: Address,
  to: Address,
  amountAtomic: bigint,
): Promise<void> {
  await funder.waitForTransactionReceipt({
    hash: await funder.writeContract({
      address: usdc,
      abi: transferAbi,
      functionName: 'transfer',
      args: [to, amountAtomic],
      chain: null,
    }),
  })
}

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
  const funder = funderClient(q)
  const deployed = await funder.waitForTransactionReceipt({
    hash: await funder.deployContract({
      abi: testSmartWalletArtifact.abi,
      bytecode: testSmartWalletArtifact.bytecode as Hex,
      args: [owner.address],
      chain: null,
    }),
  })
  const wallet = deployed.contractAddress!
  await sendUsdc(funder, q.usdc, wallet, q.amountAtomic)
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

const factories = new Map<string, Promise<Address>>()

/** The TestSmartWalletFactory of the chain at `rpcUrl`, deployed by `funderKey` on first use. */
export function smartWalletFactory(q: { rpcUrl: string; funderKey: Hex }): Promise<Address> {
  let made = factories.get(q.rpcUrl)
  if (made === undefined) {
    made = deploySmartWalletFactory(q)
    factories.set(q.rpcUrl, made)
    made.catch(() => factories.delete(q.rpcUrl))
  }
  return made
}

/** Another TestSmartWalletFactory (one the service is not told to trust, say). */
export async function deploySmartWalletFactory(q: { rpcUrl: string; funderKey: Hex }): Promise<Address> {
  const funder = funderClient(q)
  const hash = await funder.deployContract({
    abi: testSmartWalletFactoryArtifact.abi,
    bytecode: testSmartWalletFactoryArtifact.bytecode as Hex,
    chain: null,
  })
  return (await funder.waitForTransactionReceipt({ hash })).contractAddress!
}

const factoryAbi = parseAbi([
  'function createWallet(address owner, bytes32 salt) returns (address)',
  'function walletAddress(address owner, bytes32 salt) view returns (address)',
])

/**
 * A wallet that does not exist yet: its address (the factory's CREATE2 address for a fresh owner) holds
 * `amountAtomic` USDC sent by `funderKey`, and `signer` signs as the wallet would, wrapped in ERC-6492 with
 * the factory call that creates it (what a counterfactual smart account's client does). `factory` defaults
 * to the chain's TestSmartWalletFactory.
 */
export async function counterfactualSmartWallet(q: {
  rpcUrl: string
  usdc: Address
  funderKey: Hex
  amountAtomic: bigint
  factory?: Address
}): Promise<{
  wallet: Address
  owner: PrivateKeyAccount
  factory: Address
  factoryData: Hex
  signer: { address: Address; signTypedData: (m: TypedDataDefinition) => Promise<Hex> }
}> {
  const factory = q.factory ?? (await smartWalletFactory(q))
  const owner = privateKeyToAccount(generatePrivateKey())
  const salt = numberToHex(1, { size: 32 })
  const reader = createPublicClient({ transport: http(q.rpcUrl) })
  const wallet = (await reader.readContract({
    address: factory,
    abi: factoryAbi,
    functionName: 'walletAddress',
    args: [owner.address, salt],
  })) as Address
  const factoryData = encodeFunctionData({
    abi: factoryAbi,
    functionName: 'createWallet',
    args: [owner.address, salt],
  })
  const funder = funderClient(q)
  await sendUsdc(funder, q.usdc, wallet, q.amountAtomic)
  const signer = {
    address: wallet,
    signTypedData: async (m: TypedDataDefinition) =>
      serializeErc6492Signature({
        address: factory,
        data: factoryData,
        signature: await owner.signTypedData(m),
      }),
  }
  return { wallet, owner, factory, factoryData, signer }
}
