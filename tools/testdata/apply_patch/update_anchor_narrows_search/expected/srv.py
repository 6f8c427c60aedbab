class Client:
    def stop(self):
        pass

class Server:
    def start(self):
        pass

    def stop(self):
        self.running = False
