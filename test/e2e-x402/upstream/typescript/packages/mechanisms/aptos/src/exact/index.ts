export { ExactAptosScheme } from "./client/scheme";
