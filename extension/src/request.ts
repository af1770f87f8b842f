import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** Thrown for a non-2xx answer; `message` is the server's explanation. */
export class NeuronApiError extends Error {
  constructor(
    readonly status: number,
    message: string
  ) {
    super(message);
    this.name = 'NeuronApiError';
  }
}

/** Fetch a `neuron-studio/` route; a non-2xx answer throws with the server's message. */
async function fetchAPI(
  endPoint: string,
  params: Record<string, string | number | undefined>,
  init: RequestInit
): Promise<Response> {
  const settings = ServerConnection.makeSettings();
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) {
      query.set(key, String(value));
    }
  }
  const qs = query.toString();
  const url =
    URLExt.join(settings.baseUrl, 'neuron-studio', endPoint) + (qs ? `?${qs}` : '');
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  if (!response.ok) {
    const data = parseBody(await response.text());
    throw new NeuronApiError(
      response.status,
      (data && typeof data.message === 'string' && data.message) || response.statusText
    );
  }
  return response;
}

function parseBody(text: string): any {
  if (text.length === 0) {
    return null;
  }
  try {
    return JSON.parse(text);
  } catch {
    return { message: text };
  }
}

/**
 * Call a `neuron-studio/` route. The one request path of the extension: all errors throw.
 */
export async function requestAPI<T>(
  endPoint: string,
  params: Record<string, string | number | undefined> = {},
  init: RequestInit = {}
): Promise<T> {
  const response = await fetchAPI(endPoint, params, init);
  return parseBody(await response.text()) as T;
}

/** A file a route sends (a download), through the same authenticated request path. */
export async function requestBlob(
  endPoint: string,
  params: Record<string, string | number | undefined> = {}
): Promise<Blob> {
  return (await fetchAPI(endPoint, params, {})).blob();
}
