from delegate.gateway import main

if __name__ == "__main__":
    main.run()
