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

/**
 * Call a `neuron-studio/` route. The one request path of the extension: all errors throw.
 */
export async function requestAPI<T>(
  endPoint: string,
  params: Record<string, string | number | undefined> = {},
  init: RequestInit = {}
): Promise<T> {
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
  const text = await response.text();
  let data: any = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!response.ok) {
    throw new NeuronApiError(
      response.status,
      (data && typeof data.message === 'string' && data.message) || response.statusText
    );
  }
  return data as T;
}
